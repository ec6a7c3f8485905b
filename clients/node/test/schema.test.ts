// advlock in a schema that is not on search_path (the extension, and the SQL edition): found
// once per connection (or given as `schema`), every name qualified; a database without advlock
// names the fix (S31, S32).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, test } from "node:test";
import pg from "pg";
import postgres from "postgres";
import * as advlock from "../src/index.js";
import { DSN, advisoryLocks, connect, nothingLeftAfterEach, serverKind, withAdmin } from "./helpers.js";

nothingLeftAfterEach();
const made: string[] = [];

function dsnOf(database: string): string {
  const u = new URL(DSN);
  u.pathname = "/" + database;
  return u.toString();
}

async function freshDatabase(kind: "extension" | "edition" | "none"): Promise<string> {
  const name = `advlock_node_schema_${kind}`;
  await withAdmin(async (admin) => {
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.query(`CREATE DATABASE ${name}`);
  });
  made.push(name);
  const c = await connect("schema-setup", dsnOf(name));
  try {
    if (kind === "extension") {
      await c.query("CREATE SCHEMA advlock");
      await c.query("CREATE EXTENSION advlock SCHEMA advlock");
    } else if (kind === "edition") {
      await c.query("CREATE SCHEMA advlock");
      await c.query("SET search_path = advlock");
      await c.query(readFileSync(new URL("../../../../edition/advlock_sql.sql", import.meta.url), "utf8"));
    }
  } finally {
    await c.end();
  }
  return dsnOf(name);
}

after(async () => {
  await withAdmin(async (admin) => {
    for (const name of made) await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  });
});

for (const kind of ["extension", "edition"] as const) {
  test(`S31 advlock (${kind}) off search_path: every helper works, the schema looked up once per connection`, async () => {
    const dsn = await freshDatabase(kind);
    const c = await connect("off-path", dsn);
    try {
      assert.equal((await c.query("SELECT to_regproc('advlock_key') IS NULL AS missing")).rows[0].missing, true);
      const sent: string[] = [];
      const query = c.query.bind(c);
      (c as unknown as { query: unknown }).query = (config: string | { text: string }, ...rest: never[]) => {
        sent.push(typeof config === "string" ? config : config.text);
        return (query as (...a: unknown[]) => unknown)(config, ...rest);
      };
      await advlock.withLock(c, "account", 42, { timeoutMs: 1000 }, async () => {
        assert.deepEqual((await advlock.holders(c)).map((e) => e.key), [advlock.key("account", 42)]);
        assert.equal(await advlock.tryLock(c, "account", 43), true);
        await advlock.withLockAll(c, "account", [1, 2], { timeoutMs: 1000 }, () => undefined);
      });
      // BEGIN, the lookup (once), the lock, holders, tryLock, lockAll, COMMIT.
      assert.equal(sent.filter((s) => s.includes("pg_extension")).length, 1, sent.join("\n"));
      assert.equal(sent.length, 7, sent.join("\n"));
      sent.length = 0;
      await advlock.withLock(c, "account", 42, { timeoutMs: 1000 }, () => undefined);
      assert.equal(sent.length, 3); // BEGIN, lock, COMMIT: no lookup for a known connection
      sent.length = 0;
      await advlock.withLock(c, "account", 42, { timeoutMs: 1000, schema: "advlock" }, () => undefined);
      assert.ok(sent[1]?.includes('"advlock".advlock_lock_with_timeout'));
      await assert.rejects(advlock.withLock(c, "account", 2, { timeoutMs: 1000, schema: "no_such_schema" }, () => undefined), { code: "3F000" });
    } finally {
      await c.end();
    }
    for (const driver of ["pg", "postgres"] as const) {
      await advlock.withSessionLock(dsn, "migrate", "", { timeoutMs: 1000, driver }, async (held) => {
        assert.ok(held.token > 0n && (await held.holding()));
      });
    }
    const sql = postgres(dsn, { max: 1 });
    assert.equal(await advlock.withLock(sql, "account", 44, { timeoutMs: 1000 }, (tx) => advlock.tryLock(tx, "account", 45)), true);
    await sql.end();
    if ((await serverKind()) === "preloaded" && kind === "extension") {
      const pool = new pg.Pool({ connectionString: dsn, max: 2 });
      assert.ok((await advlock.lease(pool, "report", "daily", { ttlMs: 5000, timeoutMs: 1000 }, (l) => l.token)) > 0n);
      assert.ok((await advlock.lease(pool, "report", "daily", { ttlMs: 5000, timeoutMs: 1000, schema: "advlock" }, (l) => l.token)) > 0n);
      await pool.end();
    }
    await withAdmin(async (admin) => assert.deepEqual(await advisoryLocks(admin), []));
  });
}

test("S32 a database without advlock: NotInstalledError naming CREATE EXTENSION, the SQL edition and the schema option", async () => {
  const dsn = await freshDatabase("none");
  const c = await connect("none", dsn);
  try {
    await assert.rejects(
      advlock.withLock(c, "account", 1, { timeoutMs: 1000 }, () => undefined),
      (e: Error) => e instanceof advlock.NotInstalledError && /CREATE EXTENSION advlock.*SQL edition.*schema option/.test(e.message) && /advlock_node_schema_none/.test(e.message),
    );
  } finally {
    await c.end();
  }
  await assert.rejects(advlock.sessionLock(dsn, "migrate", "", { timeoutMs: 1000 }), advlock.NotInstalledError);
});
