// S34: every ```js example of README.md runs as written against the packed package (run_tests.sh
// unpacks `npm pack`'s tarball into ADVLOCK_NODE_README_DIR/node_modules/advlock, beside pg and
// postgres), with DATABASE_URL set; a `// -> text` comment is output the example must print.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";
import { DSN, LEASES_SKIP, nothingLeftAfterEach, serverKind } from "./helpers.js";

nothingLeftAfterEach();
const dir = process.env["ADVLOCK_NODE_README_DIR"];
const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");
const examples = [...readme.matchAll(/^```js\n([\s\S]*?)^```$/gm)].map((m) => m[1] as string);
const kind = await serverKind();

test("S34 the README has examples, and the packed package is there to run them", () => {
  assert.ok(examples.length >= 8, `${examples.length} examples`);
  assert.ok(dir, "ADVLOCK_NODE_README_DIR is not set: run clients/node/run_tests.sh");
});

examples.forEach((code, i) => {
  const first = code.split("\n").find((l) => l.startsWith("import {"))?.replace(/ from .*/, "") ?? "";
  const leases = /\b(lease|leader|observe|leaseCheck)\(/.test(code);
  test(`S34 README example ${i + 1} runs as written: ${first}`, { skip: !dir ? "run by run_tests.sh" : leases ? LEASES_SKIP[kind] : false }, async () => {
    const file = join(dir as string, `example-${i + 1}.mjs`);
    writeFileSync(file, code);
    const { stdout } = await promisify(execFile)(process.execPath, [file], {
      cwd: dir,
      env: { ...process.env, DATABASE_URL: DSN },
      timeout: 60_000,
    });
    for (const m of code.matchAll(/\/\/ -> (.*)$/gm)) {
      const want = (m[1] as string).trim();
      assert.ok(stdout.split("\n").some((line) => line.includes(want)), `example ${i + 1} must print ${JSON.stringify(want)}; printed:\n${stdout}`);
    }
  });
});
