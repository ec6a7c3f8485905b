// The callback's connection type follows what withLock was given (checked by tsc --strict in
// run_tests.sh: a wrong inference fails the build), and the run-time answers match.
import assert from "node:assert/strict";
import { test } from "node:test";
import pg from "pg";
import postgres from "postgres";
import * as advlock from "../src/index.js";
import { DSN, nothingLeftAfterEach } from "./helpers.js";

nothingLeftAfterEach();
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
const pool = (): pg.Pool => new pg.Pool({ connectionString: DSN, max: 1 });
const fromPool: Equal<advlock.ConnOf<pg.Pool>, pg.PoolClient> = true;
const fromClient: Equal<advlock.ConnOf<pg.Client>, pg.Client> = true;
const fromSql: Equal<advlock.ConnOf<postgres.Sql>, postgres.TransactionSql> = true;
const fromTx: Equal<advlock.ConnOf<postgres.TransactionSql>, postgres.TransactionSql> = true;

test("S33 the callback gets a PoolClient for a Pool, the client for a Client, a TransactionSql for a postgres.js sql", async () => {
  assert.ok(fromPool && fromClient && fromSql && fromTx);
  const p = pool();
  const released = await advlock.withLock(p, "account", 1, { timeoutMs: 1000 }, (client) => typeof client.release);
  assert.equal(released, "function");
  await p.end();
  const sql = postgres(DSN, { max: 1 });
  assert.equal(await advlock.withLock(sql, "account", 1, { timeoutMs: 1000 }, (tx) => typeof tx.savepoint), "function");
  await sql.end();
});
