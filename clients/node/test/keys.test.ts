// S01, S02: keys equal the vectors and the server; bad arguments fail before any round trip.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import pg from "pg";
import postgres from "postgres";
import * as advlock from "../src/index.js";
import { DSN, connect } from "./helpers.js";

interface Vector {
  ns: string;
  id?: string;
  id_int?: string;
  key: string;
}

function vectors(): Vector[] {
  const path = new URL("../../../../pg_test/vectors/advlock_key_v1.json", import.meta.url);
  // Keys exceed 2^53: quote the integer fields before JSON.parse so no precision is lost.
  const text = readFileSync(path, "utf8").replace(/("(?:key|id_int)"\s*:\s*)(-?\d+)/g, '$1"$2"');
  const v = (JSON.parse(text) as { vectors: Vector[] }).vectors;
  assert.ok(v.length >= 20);
  return v;
}

test("S01 every vector, without a server and equal to the server's advlock_key", async () => {
  const c = await connect();
  try {
    for (const v of vectors()) {
      const want = BigInt(v.key);
      const id = v.id_int !== undefined ? BigInt(v.id_int) : (v.id as string);
      assert.equal(advlock.key(v.ns, id), want, JSON.stringify(v));
      const sql = v.id_int !== undefined ? "SELECT CAST(advlock_key($1::text, $2::int8) AS text)" : "SELECT CAST(advlock_key($1::text, $2::text) AS text)";
      const r = await c.query({ text: sql, values: [v.ns, String(id)], rowMode: "array" });
      assert.equal(BigInt((r.rows[0] as string[])[0] as string), want, JSON.stringify(v));
    }
  } finally {
    await c.end();
  }
  assert.equal(advlock.key("account", 42), advlock.key("account", "42"));
  assert.equal(advlock.key("account", 42n), 7700915891107303510n);
  assert.equal(advlock.key("account", -7), advlock.key("account", "-7"));
  assert.equal(advlock.key("migrate"), advlock.key("migrate", ""));
  assert.equal(advlock.key("migrate"), -4880605526533726798n);
});

const BAD_KEYS: [unknown, unknown, new (...a: never[]) => Error, string][] = [
  ["", "x", RangeError, "ns"],
  [null, "x", TypeError, "ns"],
  [Buffer.from("account"), "x", TypeError, "ns"],
  ["a\0b", "x", RangeError, "ns"],
  ["account", true, TypeError, "id"],
  ["account", null, TypeError, "id"],
  ["account", 4.2, RangeError, "id"],
  ["account", 2 ** 53, RangeError, "id"],
  ["account", 2n ** 63n, RangeError, "id"],
  ["account", "a\0b", RangeError, "id"],
];

test("S02 key(): bad arguments are refused, the message starting with the argument", () => {
  for (const [ns, id, error, name] of BAD_KEYS) {
    assert.throws(() => advlock.key(ns as string, id as string), (e: Error) => e instanceof error && new RegExp(`^${name.replace(".", "\\.")}\\b`).test(e.message), `${String(ns)} ${String(id)}`);
  }
});

type Call = (db: never) => Promise<unknown>;
const noop = async (): Promise<void> => undefined;
const BAD_CALLS: [Call, new (...a: never[]) => Error, string][] = [
  [(c) => advlock.withLock(c, "account", 42, { timeoutMs: -1 }, noop), RangeError, "timeoutMs"],
  [(c) => advlock.withLock(c, "account", 42, { timeoutMs: Number.NaN }, noop), RangeError, "timeoutMs"],
  [(c) => advlock.withLock(c, "account", 42, { timeoutMs: Infinity }, noop), RangeError, "timeoutMs"],
  [(c) => advlock.withLock(c, "account", 42, { timeoutMs: true as never }, noop), TypeError, "timeoutMs"],
  [(c) => advlock.withLock(c, "account", 42, { timeoutMs: "2" as never }, noop), TypeError, "timeoutMs"],
  [(c) => advlock.withLock(c, "account", 42, { timeoutMs: 3e9 }, noop), RangeError, "timeoutMs"],
  [(c) => advlock.withLock(c, "account", 42, {} as never, noop), TypeError, "timeoutMs"],
  [(c) => advlock.withLock(c, "", 42, { timeoutMs: 1 }, noop), RangeError, "ns"],
  [(c) => advlock.withLock(c, "account", true as never, { timeoutMs: 1 }, noop), TypeError, "id"],
  [(c) => advlock.withLock(c, "account", 42, { timeoutMs: 1, shared: "yes" as never }, noop), TypeError, "shared"],
  [(c) => advlock.withLock(c, "account", 42, { timeoutMs: 1, schema: "" }, noop), RangeError, "schema"],
  [(c) => advlock.withLock(c, "account", 42, { timeoutMs: 1, signal: "x" as never }, noop), TypeError, "signal"],
  [(c) => advlock.withLock(c, "account", 42, { timeoutMs: 1, timeout: 2 } as never, noop), TypeError, "options.timeout"],
  [(c) => advlock.withLock(c, "account", 42, { timeoutMs: 1 }, "fn" as never), TypeError, "fn"],
  [(c) => advlock.tryLock(c, "account", null as never), TypeError, "id"],
  [(c) => advlock.tryLock(c, "account", 1, { timeoutMs: -0.5 }), RangeError, "timeoutMs"],
  [(c) => advlock.withLockAll(c, "account", [], { timeoutMs: 1 }, noop), RangeError, "ids"],
  [(c) => advlock.withLockAll(c, "account", "42" as never, { timeoutMs: 1 }, noop), TypeError, "ids"],
  [(c) => advlock.withLockAll(c, "account", [42, false as never], { timeoutMs: 1 }, noop), TypeError, "ids element"],
  [(c) => advlock.holders(c, "", 1), RangeError, "ns"],
];

test("S02 bad arguments are refused before any round trip (closed pg client, ended postgres.js sql)", async () => {
  const client = await connect();
  await client.end();
  const sql = postgres(DSN, { max: 1 });
  await sql.end();
  for (const db of [client, sql]) {
    for (const [call, error, name] of BAD_CALLS) {
      await assert.rejects(call(db as never), (e: Error) => e instanceof error && new RegExp(`^${name.replace(".", "\\.")}\\b`).test(e.message), `${call.toString()}: ${name}`);
    }
  }
});

test("S02 S12 sessionLock and lease: bad arguments and bad connection strings before connecting", async () => {
  const unreachable = "postgresql://postgres@127.0.0.1:1/nothing";
  const bad: [() => Promise<unknown>, new (...a: never[]) => Error, string][] = [
    [() => advlock.sessionLock(unreachable, "migrate", "", { timeoutMs: -1 }), RangeError, "timeoutMs"],
    [() => advlock.sessionLock(unreachable, "migrate", true as never, { timeoutMs: 1 }), TypeError, "id"],
    [() => advlock.sessionLock(unreachable, "", "", { timeoutMs: 1 }), RangeError, "ns"],
    [() => advlock.sessionLock(unreachable, "migrate", "", { timeoutMs: 1, driver: "pg8000" as never }), RangeError, "driver"],
    [() => advlock.sessionLock("host=/tmp port", "migrate", "", { timeoutMs: 1 }), RangeError, "connectionString"],
    [() => advlock.sessionLock("mysql://u@h/db", "migrate", "", { timeoutMs: 1 }), RangeError, "connectionString"],
  ];
  const pool = new pg.Pool({ connectionString: unreachable }); // never connected: a round trip would fail with ECONNREFUSED
  const lease = (o: object, ns = "report", id: unknown = "daily"): Promise<unknown> =>
    advlock.lease(pool, ns, id as string, { ttlMs: 30_000, timeoutMs: 1000, ...o } as never, noop);
  bad.push(
    [() => lease({ ttlMs: 0 }), RangeError, "ttlMs"],
    [() => lease({ ttlMs: -1 }), RangeError, "ttlMs"],
    [() => lease({ ttlMs: Infinity }), RangeError, "ttlMs"],
    [() => lease({ ttlMs: "30" }), TypeError, "ttlMs"],
    [() => lease({ timeoutMs: -1 }), RangeError, "timeoutMs"],
    [() => lease({ timeoutMs: true }), TypeError, "timeoutMs"],
    [() => lease({ slots: 0 }), RangeError, "slots"],
    [() => lease({ slots: true }), TypeError, "slots"],
    [() => lease({ slots: 2.5 }), TypeError, "slots"],
    [() => lease({ renewDeadlineMs: 0 }), RangeError, "renewDeadlineMs"],
    [() => lease({ renewDeadlineMs: 30_000 }), RangeError, "renewDeadlineMs"],
    [() => lease({ schema: 3 }), TypeError, "schema"],
    [() => lease({}, ""), RangeError, "ns"],
    [() => lease({}, "report", true), TypeError, "id"],
  );
  for (const [call, error, name] of bad) {
    await assert.rejects(call(), (e: Error) => e instanceof error && new RegExp(`^${name.replace(".", "\\.")}\\b`).test(e.message), name);
  }
  assert.equal(pool.totalCount, 0);
  await pool.end();
});
