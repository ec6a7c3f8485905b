// The lock-timeout DETAIL is read as data: rendered from the wording catalogued in
// sql/messages.toml (the server's texts, tied to its Rust and SQL by scripts/messages.py), it
// must parse back, with the client's own parser, to the pids, application_names and states put in.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { parseHolders } from "../src/errors.js";

const CATALOG = join(dirname(fileURLToPath(import.meta.url)), "../../../../sql/messages.toml"); // from build/test/

/** The `texts` of the catalog's [[description]] with id = "holders" (TOML basic strings, which
 * JSON reads alike). */
function holderTexts(): string[] {
  const toml = readFileSync(CATALOG, "utf8");
  const block = toml.split(/^\[\[/m).find((b) => b.startsWith("description]]") && /^id = "holders"$/m.test(b));
  assert.ok(block, `${CATALOG}: no [[description]] with id = "holders"`);
  const texts = /^texts = (\[[^\]]*\])/m.exec(block)?.[1];
  assert.ok(texts, `${CATALOG}: the holders description has no texts`);
  return JSON.parse(texts) as string[];
}

/** quote_literal as the server writes application_name and state: '' for a quote, E'' (with the
 * backslash doubled) when there is a backslash, nothing for NULL. */
function quoteLiteral(v: string | null): string {
  if (v === null) return "";
  const body = v.replaceAll("'", "''");
  return v.includes("\\") ? `E'${body.replaceAll("\\", "\\\\")}'` : `'${body}'`;
}

test("S06 holders rendered from sql/messages.toml's texts parse back to pid, application_name and state", () => {
  const texts = holderTexts();
  const heldBy = texts.find((t) => t.includes("{holder_list}"));
  const one = texts.find((t) => t.includes("{pid}"));
  assert.ok(heldBy && one, `sql/messages.toml's holders texts ${JSON.stringify(texts)} no longer have "...{holder_list}..." and "...{pid}...": update parseHolders (src/errors.ts)`);
  const samples = [
    { pid: 4242, applicationName: "billing-worker", state: "idle in transaction" },
    { pid: 7, applicationName: "it's a C:\\path", state: "active" },
    { pid: 99, applicationName: "cron", state: null },
  ];
  const render = (h: (typeof samples)[number]): string =>
    one.replace("{pid}", String(h.pid)).replace("{application_name}", quoteLiteral(h.applicationName)).replace("{state}", quoteLiteral(h.state));
  for (const list of [samples, samples.slice(0, 2)]) {
    const detail: string = heldBy.replace("{holder_list}", list.map(render).join(", "));
    assert.deepEqual(parseHolders(detail), list, `parseHolders (src/errors.ts) no longer reads ${JSON.stringify(detail)}, rendered from sql/messages.toml's texts ${JSON.stringify([heldBy, one])}: the catalog's wording changed`);
  }
});
