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

// One connection per pattern, so that no pattern always follows an operation on its own backend.
const clients = [new pg.Client({ connectionString: url }), new pg.Client({ connectionString: url })];
for (const c of clients) await c.connect();
const sqls = [postgres(url, { max: 1 }), postgres(url, { max: 1 })];

const patterns = {
  "pg: withLock": async (i) => withLock(clients[0], "bench", i, { timeoutMs: 1000 }, () => undefined),
  "pg: by hand": async (i) => {
    const client = clients[1];
    await client.query("BEGIN");
    await client.query({ text: LOCK, values: ["bench", String(i), 1000, "exclusive"], rowMode: "array" });
    await client.query("COMMIT");
  },
  "postgres.js: withLock": async (i) => withLock(sqls[0], "bench", i, { timeoutMs: 1000 }, () => undefined),
  "postgres.js: by hand": async (i) =>
    sqls[1].begin(async (tx) => {
      await tx.unsafe(LOCK, ["bench", String(i), 1000, "exclusive"]).values();
    }),
};
const names = Object.keys(patterns);
for (const name of names) for (let i = 0; i < 50; i++) await patterns[name](i); // warm up (schema lookup, JIT)
// The patterns alternate operation by operation, in a new random order each time (no pattern
// always follows the same one), so a burst of other work on the machine lands on all of them
// alike; each round sums each pattern's time.
const us = Object.fromEntries(names.map((n) => [n, []]));
for (let r = 0; r < rounds; r++) {
  const total = Object.fromEntries(names.map((n) => [n, 0n]));
  for (let i = 0; i < per; i++) {
    const order = names.map((n) => [Math.random(), n]).sort((a, b) => a[0] - b[0]).map((x) => x[1]);
    for (const name of order) {
      const t = process.hrtime.bigint();
      await patterns[name](i);
      total[name] += process.hrtime.bigint() - t;
    }
  }
  for (const name of names) us[name].push(Number(total[name]) / 1000 / per);
}
for (const c of clients) await c.end();
for (const s of sqls) await s.end();
console.log(JSON.stringify({ rounds, per, us }));
