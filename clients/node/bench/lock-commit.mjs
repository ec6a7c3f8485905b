// Bench case 12 (bench/harness/case_node.py): an uncontended lock-and-commit through the client
// (withLock) against the same SQL sent by hand through the same driver, rounds interleaved on one
// connection each. Prints one JSON object: microseconds per lock-and-commit, per round.
// Usage: node lock-commit.mjs URL ROUNDS PER_ROUND
import pg from "pg";
import postgres from "postgres";
import { withLock } from "../dist/index.js";

const [url, roundsArg, perArg] = process.argv.slice(2);
const rounds = Number(roundsArg);
const per = Number(perArg);
// The statement withLock sends (schema-qualified as the client qualifies it).
const LOCK =
  'SELECT "public".advlock_lock_with_timeout(CAST($1 AS text), CAST($2 AS text), CAST($3 AS int4), mode => CAST($4 AS text))';

const client = new pg.Client({ connectionString: url });
await client.connect();
const sql = postgres(url, { max: 1 });

const patterns = {
  "pg: withLock": async (i) => withLock(client, "bench", i, { timeoutMs: 1000 }, () => undefined),
  "pg: by hand": async (i) => {
    await client.query("BEGIN");
    await client.query({ text: LOCK, values: ["bench", String(i), 1000, "exclusive"], rowMode: "array" });
    await client.query("COMMIT");
  },
  "postgres.js: withLock": async (i) => withLock(sql, "bench", i, { timeoutMs: 1000 }, () => undefined),
  "postgres.js: by hand": async (i) =>
    sql.begin(async (tx) => {
      await tx.unsafe(LOCK, ["bench", String(i), 1000, "exclusive"]).values();
    }),
};
const names = Object.keys(patterns);
for (const name of names) for (let i = 0; i < 50; i++) await patterns[name](i); // warm up (schema lookup, JIT)
const us = Object.fromEntries(names.map((n) => [n, []]));
for (let r = 0; r < rounds; r++) {
  const order = names.slice(r % names.length).concat(names.slice(0, r % names.length)); // rotated
  for (const name of order) {
    const t = process.hrtime.bigint();
    for (let i = 0; i < per; i++) await patterns[name](i);
    us[name].push(Number(process.hrtime.bigint() - t) / 1000 / per);
  }
}
await client.end();
await sql.end();
console.log(JSON.stringify({ rounds, per, us }));
