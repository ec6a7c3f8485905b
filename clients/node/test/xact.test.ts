// Transaction-scope locks: node-postgres Client, PoolClient and Pool, postgres.js sql and
// sql.begin's tx (S03-S10, S33).
import assert from "node:assert/strict";
import { test } from "node:test";
import pg from "pg";
import postgres from "postgres";
import * as advlock from "../src/index.js";
import { DSN, type PgClient, advisoryLocks, backends, connect, nothingLeftAfterEach, serverKind, sleep, waitUntil, waiting, withAdmin } from "./helpers.js";

nothingLeftAfterEach();
const KEY42 = advlock.key("account", 42).toString();

test("S03 withLock on a pg client: held until COMMIT, in the transaction it joins or opens; shared mode", async () => {
  await withAdmin(async (admin) => {
    const c = await connect();
    const pid = c.processID;
    try {
      // A client outside a transaction: withLock opens one around fn and commits it.
      const out = await advlock.withLock(c, "account", 42, { timeoutMs: 2000 }, async (conn) => {
        assert.equal(conn, c);
        assert.deepEqual(await advisoryLocks(admin, pid), [[pid, true, "ExclusiveLock", KEY42]]);
        return "done";
      });
      assert.equal(out, "done");
      assert.deepEqual(await advisoryLocks(admin, pid), []);
      // Inside the caller's transaction: it joins it, and leaving fn releases nothing.
      await c.query("BEGIN");
      await advlock.withLock(c, "account", 42, { timeoutMs: 2000 }, () => undefined);
      assert.deepEqual(await advisoryLocks(admin, pid), [[pid, true, "ExclusiveLock", KEY42]]);
      await c.query("ROLLBACK");
      assert.deepEqual(await advisoryLocks(admin, pid), []);
      // An error in fn rolls back the transaction withLock opened: the lock goes with it.
      await assert.rejects(
        advlock.withLock(c, "account", 42, { timeoutMs: 2000 }, async () => {
          throw new Error("boom");
        }),
        /boom/,
      );
      assert.deepEqual(await advisoryLocks(admin, pid), []);
      // shared: coexists with another shared holder, excludes an exclusive one.
      const b = await connect();
      try {
        await advlock.withLock(c, "report", "q3", { timeoutMs: 1000, shared: true }, async () => {
          await advlock.withLock(b, "report", "q3", { timeoutMs: 1000, shared: true }, async () => {
            const rows = (await advisoryLocks(admin)).map((r) => [r[1], r[2], r[3]]);
            assert.deepEqual(rows, [[true, "ShareLock", advlock.key("report", "q3").toString()], [true, "ShareLock", advlock.key("report", "q3").toString()]]);
          });
          const x = await connect();
          await x.query("BEGIN");
          assert.equal(await advlock.tryLock(x, "report", "q3"), false);
          await x.query("COMMIT");
          await x.end();
        });
      } finally {
        await b.end();
      }
    } finally {
      await c.end();
    }
  });
});

test("S04 refused outside a transaction (tryLock in autocommit, aborted transactions, pools, postgres.js sql)", async () => {
  await withAdmin(async (admin) => {
    const c = await connect();
    const pid = c.processID;
    try {
      await assert.rejects(advlock.tryLock(c, "account", 42), (e: Error) => e instanceof advlock.NotInTransactionError && /BEGIN|withLock/.test(e.message));
      await c.query("BEGIN");
      await assert.rejects(c.query("SELECT 1/0"));
      // (Right after the failure node-postgres may not have read the server's "aborted" yet: then
      // the server refuses the statement, and the error is the same.)
      for (const call of [
        () => advlock.tryLock(c, "account", 42),
        () => advlock.withLock(c, "account", 42, { timeoutMs: 1 }, () => undefined),
        () => advlock.withLockAll(c, "account", [1, 2], { timeoutMs: 1 }, () => undefined),
      ]) {
        await assert.rejects(call(), (e: Error) => e instanceof advlock.NotInTransactionError && /aborted/.test(e.message));
      }
      await c.query("ROLLBACK");
      assert.deepEqual(await advisoryLocks(admin, pid), []);
    } finally {
      await c.end();
    }
    const pool = new pg.Pool({ connectionString: DSN, max: 1 });
    await assert.rejects(advlock.tryLock(pool as never, "account", 42), advlock.NotInTransactionError);
    await pool.end();
    const sql = postgres(DSN, { max: 1 });
    await assert.rejects(advlock.tryLock(sql, "account", 42), (e: Error) => e instanceof advlock.NotInTransactionError && /sql\.begin/.test(e.message));
    const reserved = await sql.reserve();
    await assert.rejects(advlock.tryLock(reserved, "account", 42), advlock.NotInTransactionError);
    reserved.release();
    await sql.end();
  });
});

test("S05 S06 a bounded wait of 200 ms, waited by the server, names the holder and leaves lock_timeout unchanged", async () => {
  await withAdmin(async (admin) => {
    const holder = await connect("holder");
    const conn = await connect("waiter");
    try {
      await holder.query("SET lock_timeout = '7s'");
      await conn.query("SET lock_timeout = '3s'");
      await holder.query("BEGIN");
      assert.equal(await advlock.tryLock(holder, "account", 42), true);
      const started = performance.now();
      const err = await advlock.withLock(conn, "account", 42, { timeoutMs: 200 }, () => assert.fail("must not get it")).then(
        () => null,
        (e: unknown) => e,
      );
      const elapsed = performance.now() - started;
      assert.ok(err instanceof advlock.LockTimeoutError, String(err));
      assert.match(err.message, /200 ms/);
      assert.ok(elapsed >= 190 && elapsed < 5000, String(elapsed));
      assert.equal(err.pid, holder.processID);
      assert.equal(err.applicationName, "holder");
      assert.equal(err.holders[0]?.state, "idle in transaction");
      assert.deepEqual(await advisoryLocks(admin, conn.processID as number), []);
      assert.equal((await conn.query("SHOW lock_timeout")).rows[0].lock_timeout, "3s");
      assert.equal((await holder.query("SHOW lock_timeout")).rows[0].lock_timeout, "7s");
      await holder.query("COMMIT");
    } finally {
      await holder.end();
      await conn.end();
    }
  });
});

test("S07 tryLock: two workers race for account 42 and exactly one wins (pg Pool)", async () => {
  await withAdmin(async (admin) => {
    const pool = new pg.Pool({ connectionString: DSN, max: 2, application_name: "worker" });
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const results: [boolean, number][] = [];
    const worker = async (): Promise<void> => {
      const c = await pool.connect();
      try {
        await c.query("BEGIN");
        const got = await advlock.tryLock(c, "account", 42);
        results.push([got, (c as unknown as PgClient).processID]);
        if (got) await released;
        await c.query("COMMIT");
      } finally {
        c.release();
      }
    };
    const both = Promise.all([worker(), worker()]);
    await waitUntil(() => results.length === 2, "both workers to try");
    const winners = results.filter((r) => r[0]);
    assert.equal(winners.length, 1, JSON.stringify(results));
    assert.deepEqual(await advisoryLocks(admin), [[(winners[0] as [boolean, number])[1], true, "ExclusiveLock", KEY42]]);
    release();
    await both;
    await pool.end();
  });
});

test("S08 withLockAll: every key or none, one deadline", async () => {
  await withAdmin(async (admin) => {
    const a = await connect("a");
    const b = await connect("b");
    try {
      await advlock.withLockAll(a, "account", [42, 17], { timeoutMs: 1000 }, async () => {
        const keys = new Set((await advisoryLocks(admin, a.processID as number)).map((r) => r[3]));
        assert.deepEqual(keys, new Set([KEY42, advlock.key("account", 17).toString()]));
        const err = await advlock.withLockAll(b, "account", [99, 17], { timeoutMs: 100 }, () => undefined).catch((e: unknown) => e);
        assert.ok(err instanceof advlock.LockTimeoutError);
        assert.equal(err.pid, a.processID);
        assert.deepEqual(await advisoryLocks(admin, b.processID as number), []); // gave back 99: all or nothing
      });
    } finally {
      await a.end();
      await b.end();
    }
  });
});

test("S09 holders: the holder first, then the waiter blocked by it; one key; empty for a free key", async () => {
  await withAdmin(async (admin) => {
    const holder = await connect("holder");
    const waiter = await connect("waiter");
    try {
      await holder.query("BEGIN");
      await advlock.tryLock(holder, "account", 42);
      const waiting_ = advlock.withLock(waiter, "account", 42, { timeoutMs: 10_000 }, () => undefined);
      await waitUntil(() => waiting(admin, waiter.processID as number), "the waiter to queue");
      const rows = await advlock.holders(admin, "account", 42);
      assert.deepEqual(
        rows.map((r) => [r.pid, r.granted, r.mode, r.key]),
        [
          [holder.processID, true, "exclusive", advlock.key("account", 42)],
          [waiter.processID, false, "exclusive", advlock.key("account", 42)],
        ],
      );
      assert.equal(rows[0]?.applicationName, "holder");
      assert.deepEqual(rows[1]?.blockedBy, [holder.processID]);
      assert.deepEqual(await advlock.holders(admin, "account", 43), []);
      assert.equal((await advlock.holders(admin)).length, 2);
      const pool = new pg.Pool({ connectionString: DSN, max: 1 });
      assert.equal((await advlock.holders(pool as never, "account", 42)).length, 2);
      await pool.end();
      await holder.query("COMMIT");
      await waiting_; // the waiter got it at our COMMIT
    } finally {
      await holder.end();
      await waiter.end();
    }
  });
});

test("S10 an AbortSignal cancels a waiting withLock on the server: nothing held or queued, the client usable (pg)", async () => {
  await withAdmin(async (admin) => {
    const holder = await connect("holder");
    const c = await connect("waiter");
    const pid = c.processID;
    try {
      await holder.query("BEGIN");
      await advlock.tryLock(holder, "account", 42);
      for (const joined of [false, true]) {
        const ac = new AbortController();
        if (joined) await c.query("BEGIN");
        const wait = advlock.withLock(c, "account", 42, { timeoutMs: 30_000, signal: ac.signal }, () => assert.fail("must not get it"));
        await waitUntil(() => waiting(admin, pid), "the waiter to queue");
        const started = performance.now();
        ac.abort();
        await assert.rejects(wait, (e: Error) => e.name === "AbortError");
        assert.ok(performance.now() - started < 5000);
        if (joined) await c.query("ROLLBACK"); // the caller's transaction is aborted by the cancel
        assert.deepEqual(await advisoryLocks(admin, pid), []);
        assert.deepEqual(await advisoryLocks(admin, holder.processID as number), [[holder.processID, true, "ExclusiveLock", KEY42]]);
        const state = await admin.query({ text: "SELECT state FROM pg_stat_activity WHERE pid = $1", values: [pid], rowMode: "array" });
        assert.deepEqual(state.rows, [["idle"]]);
        assert.equal((await c.query("SELECT 41 + 1 AS x")).rows[0].x, 42);
      }
      await holder.query("COMMIT");
      await advlock.withLock(c, "account", 42, { timeoutMs: 1000 }, async () => {
        assert.deepEqual(await advisoryLocks(admin, pid), [[pid, true, "ExclusiveLock", KEY42]]);
      });
      // An already aborted signal sends nothing.
      await assert.rejects(advlock.withLock(c, "account", 42, { timeoutMs: 1000, signal: AbortSignal.abort() }, () => undefined), { name: "AbortError" });
    } finally {
      await holder.end();
      await c.end();
    }
  });
});

test("S10 S33 postgres.js: withLock opens sql.begin or joins a tx; a timeout names the holder; an AbortSignal cancels the wait", async () => {
  await withAdmin(async (admin) => {
    const sql = postgres(DSN, { max: 2, connection: { application_name: "pjs" }, onnotice: () => undefined });
    const holder = await connect("holder");
    try {
      const pid = await advlock.withLock(sql, "account", 42, { timeoutMs: 1000 }, async (tx) => {
        const [row] = await tx`SELECT pg_backend_pid() AS pid`;
        const p = Number(row?.["pid"]);
        assert.deepEqual(await advisoryLocks(admin, p), [[p, true, "ExclusiveLock", KEY42]]);
        assert.equal(await advlock.tryLock(tx, "account", 17), true);
        return p;
      });
      assert.deepEqual(await advisoryLocks(admin, pid), []);
      await sql.begin(async (tx) => {
        await advlock.withLockAll(tx, "account", [5, 6], { timeoutMs: 1000 }, async () => {
          assert.equal((await advisoryLocks(admin)).length, 2);
        });
        assert.equal((await advisoryLocks(admin)).length, 2); // held until sql.begin commits
      });
      await holder.query("BEGIN");
      await advlock.tryLock(holder, "account", 42);
      const err = await advlock.withLock(sql, "account", 42, { timeoutMs: 100 }, () => undefined).catch((e: unknown) => e);
      assert.ok(err instanceof advlock.LockTimeoutError, String(err));
      assert.equal(err.pid, holder.processID);
      assert.equal(err.applicationName, "holder");
      const ac = new AbortController();
      const wait = advlock.withLock(sql, "account", 42, { timeoutMs: 30_000, signal: ac.signal }, () => assert.fail("must not get it"));
      await waitUntil(async () => (await advisoryLocks(admin)).some((r) => !r[1]), "the postgres.js waiter to queue");
      ac.abort();
      await assert.rejects(wait, { name: "AbortError" });
      assert.deepEqual(await advisoryLocks(admin), [[holder.processID, true, "ExclusiveLock", KEY42]]);
      await holder.query("COMMIT");
      assert.equal(await advlock.withLock(sql, "account", 42, { timeoutMs: 1000 }, () => 7), 7);
    } finally {
      await holder.end();
      await sql.end();
    }
  });
});

test("S33 node-postgres Pool: withLock checks out a client, opens the transaction, gives the client back", async () => {
  await withAdmin(async (admin) => {
    const pool = new pg.Pool({ connectionString: DSN, max: 1, application_name: "pool" });
    try {
      const pid = await advlock.withLock(pool, "account", 42, { timeoutMs: 1000 }, async (client) => {
        const p = (client as unknown as PgClient).processID;
        assert.deepEqual(await advisoryLocks(admin, p), [[p, true, "ExclusiveLock", KEY42]]);
        return p;
      });
      assert.deepEqual(await advisoryLocks(admin, pid), []);
      assert.equal(pool.idleCount, 1); // given back
      await assert.rejects(advlock.withLock(pool, "account", 42, { timeoutMs: 1000 }, () => Promise.reject(new Error("body"))), /body/);
      assert.equal(pool.idleCount, 1);
      assert.deepEqual(await backends(admin, "pool"), [pid]);
      // Two callers of one pool of 2 contend for the lock: the second waits its turn.
      const pool2 = new pg.Pool({ connectionString: DSN, max: 2 });
      const order: string[] = [];
      await Promise.all(
        ["a", "b"].map((n) =>
          advlock.withLock(pool2, "account", 42, { timeoutMs: 5000 }, async () => {
            order.push(`${n}+`);
            await sleep(50);
            order.push(`${n}-`);
          }),
        ),
      );
      assert.ok(order.join() === "a+,a-,b+,b-" || order.join() === "b+,b-,a+,a-", order.join());
      await pool2.end();
    } finally {
      await pool.end();
    }
  });
});

test("S44 statement_timeout 300 ms shorter than the wait: withLock(timeoutMs 5000) on a busy key ends at ~0.3 s with the server's 57014 unchanged; nothing held or queued; lock_timeout as it was; a lease's renewals unaffected", async () => {
  await withAdmin(async (admin) => {
    const holder = await connect("s44-holder");
    const waiter = new pg.Client({ connectionString: DSN, application_name: "s44-waiter", options: "-c statement_timeout=300 -c lock_timeout=7s" });
    waiter.on("error", () => undefined);
    const sql = postgres(DSN, { max: 1, connection: { statement_timeout: 300, lock_timeout: 7000, application_name: "s44-waiter-pjs" } });
    const showLockTimeout = async (): Promise<unknown[]> => [
      ((await waiter.query({ text: "SHOW lock_timeout", rowMode: "array" })).rows[0] as unknown[])[0],
      ((await sql.unsafe("SHOW lock_timeout").values())[0] as unknown[])[0],
    ];
    try {
      await waiter.connect();
      await holder.query("BEGIN");
      assert.equal(await advlock.tryLock(holder, "account", 44), true);
      for (const db of [waiter, sql] as const) {
        const started = performance.now();
        const err = await advlock.withLock(db, "account", 44, { timeoutMs: 5000 }, () => assert.fail("must not get it")).catch((e: unknown) => e);
        const took = performance.now() - started;
        assert.ok(!(err instanceof advlock.AdvlockError), `passed through unchanged, got ${String(err)}`);
        assert.equal((err as { code?: string }).code, "57014");
        assert.match(String((err as Error).message), /canceling statement due to statement timeout/);
        assert.ok(took >= 250 && took < 2000, `ended after ${took} ms`);
        // Nothing held or queued but the holder's lock.
        assert.deepEqual(await advisoryLocks(admin), [[holder.processID, true, "ExclusiveLock", advlock.key("account", 44).toString()]]);
      }
      assert.deepEqual(await showLockTimeout(), ["7s", "7s"]);
      await holder.query("COMMIT");
      if ((await serverKind()) === "preloaded") {
        // Each renewal is a short statement: a statement_timeout below the TTL does not touch them.
        const pool = new pg.Pool({ connectionString: DSN, max: 2, options: "-c statement_timeout=300" });
        try {
          const renewals = await advlock.lease(pool, "report", "s44", { ttlMs: 600, timeoutMs: 0 }, async (l) => {
            await waitUntil(() => l.renewals >= 4 || l.signal.aborted, "four renewals", 5000);
            l.check();
            return l.renewals;
          });
          assert.ok(renewals >= 4);
        } finally {
          await pool.end();
        }
      }
    } finally {
      await holder.end();
      await waiter.end();
      await sql.end();
    }
  });
});
