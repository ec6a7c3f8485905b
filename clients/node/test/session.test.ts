// sessionLock(url, ...): its own connection, a fencing token, refusal of pools, lost
// connections, fenced writes, cancellation, and waits that do not stall CREATE INDEX
// CONCURRENTLY (S11-S16, S19, S20), with both drivers.
import assert from "node:assert/strict";
import { test } from "node:test";
import pg from "pg";
import postgres from "postgres";
import * as advlock from "../src/index.js";
import { toUrl } from "../src/session.js";
import { DSN, advisoryLocks, backends, connect, nothingLeftAfterEach, serverKind, sleep, waitUntil, withAdmin } from "./helpers.js";

nothingLeftAfterEach();
const KEY = advlock.key("migrate").toString();
const DRIVERS = ["pg", "postgres"] as const;

for (const driver of DRIVERS) {
  test(`S11 ${driver}: a session lock on its own idle connection, held until release, token and pid`, async () => {
    await withAdmin(async (admin) => {
      const held = await advlock.sessionLock(DSN, "migrate", "", { timeoutMs: 1000, driver, applicationName: "migrator" });
      let first: bigint;
      try {
        assert.ok(held.token > 0n);
        assert.equal(held.key, advlock.key("migrate"));
        assert.deepEqual(await backends(admin, "migrator"), [held.pid]);
        assert.deepEqual(await advisoryLocks(admin, held.pid), [[held.pid, true, "ExclusiveLock", KEY]]);
        const r = await admin.query({ text: "SELECT state FROM pg_stat_activity WHERE pid = $1", values: [held.pid], rowMode: "array" });
        assert.deepEqual(r.rows, [["idle"]]); // a session lock: no transaction open on its connection
        assert.equal(await held.holding(), true);
        first = held.token;
      } finally {
        await held.release();
      }
      assert.deepEqual(await advisoryLocks(admin), []);
      await waitUntil(async () => (await backends(admin, "migrator")).length === 0, "the dedicated connection to close");
      await held.release(); // a second release does nothing
      const again = await advlock.withSessionLock(DSN, "migrate", "", { timeoutMs: 1000, driver }, (h) => h.token);
      assert.ok(again > first, "fencing tokens increase across acquisitions");
    });
  });
}

test("S12 a connection string, never a pool or a pooled connection; key=value strings work", async () => {
  const pool = new pg.Pool({ connectionString: DSN, max: 1 });
  const client = await pool.connect();
  const sql = postgres(DSN, { max: 1 });
  for (const thing of [pool, client, sql]) {
    await assert.rejects(advlock.sessionLock(thing as never, "migrate", "", { timeoutMs: 1000 }), (e: Error) =>
      e instanceof TypeError && /takes a connection string.*pooled connection/.test(e.message),
    );
  }
  client.release();
  await pool.end();
  await sql.end();
  const u = new URL(DSN);
  const kv = `host=${u.hostname} port=${u.port} user='postgres' dbname=${u.pathname.slice(1)}`;
  assert.equal(toUrl(kv), DSN);
  await withAdmin(async (admin) => {
    for (const driver of DRIVERS) {
      await advlock.withSessionLock(kv, "migrate", "", { timeoutMs: 1000, driver }, async (held) => {
        assert.deepEqual(await advisoryLocks(admin, held.pid), [[held.pid, true, "ExclusiveLock", KEY]]);
      });
    }
  });
});

for (const driver of DRIVERS) {
  test(`S13 ${driver}: busy: the timeout names the holder and closes its connection; a longer waiter gets it at release`, async () => {
    await withAdmin(async (admin) => {
      const held = await advlock.sessionLock(DSN, "migrate", "", { timeoutMs: 1000, driver, applicationName: "first" });
      const err = await advlock.sessionLock(DSN, "migrate", "", { timeoutMs: 200, driver, applicationName: "second" }).catch((e: unknown) => e);
      assert.ok(err instanceof advlock.LockTimeoutError, String(err));
      assert.equal(err.pid, held.pid);
      assert.equal(err.applicationName, "first");
      assert.match(err.message, /within 200 ms: held by PID \d+/);
      await waitUntil(async () => (await backends(admin, "second")).length === 0, "the refused connection to close");
      const third = advlock.sessionLock(DSN, "migrate", "", { timeoutMs: 10_000, driver, applicationName: "third" });
      await waitUntil(async () => (await advisoryLocks(admin)).some((r) => !r[1]), "the third to queue");
      await held.release();
      const got = await third;
      assert.ok(got.token > held.token);
      assert.deepEqual(await advisoryLocks(admin), [[got.pid, true, "ExclusiveLock", KEY]]);
      await got.release();
    });
  });
}

test("S14 an error in the body still unlocks and closes; the error propagates unchanged", async () => {
  await withAdmin(async (admin) => {
    for (const driver of DRIVERS) {
      const boom = new RangeError("boom");
      await assert.rejects(
        advlock.withSessionLock(DSN, "migrate", "", { timeoutMs: 1000, driver, applicationName: "x" }, () => {
          throw boom;
        }),
        (e) => e === boom,
      );
      assert.deepEqual(await advisoryLocks(admin), []);
      await waitUntil(async () => (await backends(admin, "x")).length === 0, "the dedicated connection to close");
    }
  });
});

async function fencedTable(admin: pg.Client): Promise<void> {
  await admin.query("DROP TABLE IF EXISTS fenced_resource");
  await admin.query("CREATE TABLE fenced_resource (id int PRIMARY KEY, value text, fence bigint NOT NULL)");
  await admin.query("INSERT INTO fenced_resource VALUES (1, 'initial', 0)");
}

async function fencedWrite(conn: pg.Client, value: string, token: bigint): Promise<number> {
  const r = await conn.query("UPDATE fenced_resource SET value = $1, fence = $2 WHERE id = 1 AND fence < $2", [value, token.toString()]);
  return r.rowCount ?? -1;
}

for (const driver of DRIVERS) {
  test(`S15 S16 ${driver}: a terminated leader: holding() false, release() throws LockLostError; the new leader's fenced write wins`, async () => {
    await withAdmin(async (admin) => {
      await fencedTable(admin);
      const writerA = await connect("writer-a");
      const writerB = await connect("writer-b");
      try {
        const leaderA = await advlock.sessionLock(DSN, "leader", "report", { timeoutMs: 1000, driver });
        const t1 = leaderA.token;
        assert.equal(await fencedWrite(writerA, "a1", t1), 1);
        await admin.query("SELECT pg_terminate_backend($1, 5000)", [leaderA.pid]);
        assert.equal(await leaderA.holding(), false); // the loss is seen, not an exception here
        await advlock.withSessionLock(DSN, "leader", "report", { timeoutMs: 5000, driver }, async (leaderB) => {
          assert.ok(leaderB.token > t1);
          assert.equal(await fencedWrite(writerB, "b1", leaderB.token), 1);
          assert.equal(await fencedWrite(writerA, "a-late", t1), 0); // the old leader's late write changes nothing
        });
        await assert.rejects(leaderA.release(), (e: Error) => e instanceof advlock.LockLostError && /was lost/.test(e.message) && e.cause !== undefined);
        const r = await admin.query("SELECT value FROM fenced_resource");
        assert.equal(r.rows[0].value, "b1");
        // The body never asks holding(): the loss is still raised at release, not swallowed.
        await assert.rejects(
          advlock.withSessionLock(DSN, "leader", "x", { timeoutMs: 1000, driver }, async (held) => {
            await admin.query("SELECT pg_terminate_backend($1, 5000)", [held.pid]);
          }),
          advlock.LockLostError,
        );
      } finally {
        await writerA.end();
        await writerB.end();
        await admin.query("DROP TABLE fenced_resource");
      }
    });
  });
}

for (const driver of DRIVERS) {
  test(`S19 ${driver}: an AbortSignal ends a waiting session lock at once: its backend is gone, only the holder holds`, async () => {
    await withAdmin(async (admin) => {
      const held = await advlock.sessionLock(DSN, "migrate", "", { timeoutMs: 1000 });
      try {
        const ac = new AbortController();
        const wait = advlock.sessionLock(DSN, "migrate", "", { timeoutMs: 30_000, driver, applicationName: "w", signal: ac.signal });
        await waitUntil(async () => (await advisoryLocks(admin)).some((r) => !r[1]), "the waiter to queue");
        const started = performance.now();
        ac.abort();
        await assert.rejects(wait, { name: "AbortError" });
        await waitUntil(async () => (await backends(admin, "w")).length === 0, "the cancelled waiter's backend to end", 5000);
        assert.ok(performance.now() - started < 5000);
        assert.deepEqual(await advisoryLocks(admin), [[held.pid, true, "ExclusiveLock", KEY]]);
      } finally {
        await held.release();
      }
    });
  });
}

async function waiterState(admin: pg.Client, app: string): Promise<[boolean, string] | null> {
  const r = await admin.query({
    text: "SELECT backend_xmin IS NULL, wait_event_type FROM pg_stat_activity WHERE application_name = $1 AND state = 'active'",
    values: [app],
    rowMode: "array",
  });
  const row = r.rows[0] as [boolean, string | null] | undefined;
  return row && row[1] !== null ? [row[0], row[1]] : null;
}

test("S20 a waiting session lock does not stall CREATE INDEX CONCURRENTLY (CALL advlock_wait_lock holds no snapshot)", async (t) => {
  if ((await serverKind()) === "edition") {
    t.skip("the SQL edition has no snapshot-free wait (CALL advlock_wait_lock)");
    return;
  }
  await withAdmin(async (admin) => {
    await admin.query("DROP TABLE IF EXISTS cic_target");
    await admin.query("CREATE TABLE cic_target AS SELECT g AS id FROM generate_series(1, 1000) g");
    const pod1 = await advlock.sessionLock(DSN, "migrate", "", { timeoutMs: 1000, applicationName: "pod1" });
    const pod2 = advlock.sessionLock(DSN, "migrate", "", { timeoutMs: 20_000, applicationName: "pod2" });
    const state = await waitUntil(() => waiterState(admin, "pod2"), "pod 2 to wait");
    assert.deepEqual(state, [true, "Lock"]); // no snapshot (no xmin) while it waits
    const migration = await connect("pod1-migration");
    const started = performance.now();
    await migration.query("CREATE INDEX CONCURRENTLY cic_target_id ON cic_target (id)");
    const took = performance.now() - started;
    await migration.end();
    assert.ok(await pod1.holding());
    await pod1.release();
    const got = await pod2;
    assert.ok(took < 5000, `CREATE INDEX CONCURRENTLY took ${took} ms`);
    assert.ok(got.token > pod1.token);
    await got.release();
    await admin.query("DROP TABLE cic_target");
  });
});

for (const driver of DRIVERS) {
  test(`S42 ${driver}: the lock connection terminated mid-body: the body's signal aborts within 2 s, leaving throws LockLostError with the cause`, async () => {
    await withAdmin(async (admin) => {
      let abortedAfter = -1;
      let reason: unknown;
      const err = await advlock
        .withSessionLock(DSN, "migrate", "", { timeoutMs: 1000, driver }, async (held) => {
          assert.equal(held.signal.aborted, false);
          const aborted = new Promise<void>((resolve) => held.signal.addEventListener("abort", () => resolve(), { once: true }));
          const killedAt = performance.now();
          await admin.query("SELECT pg_terminate_backend($1)", [held.pid]);
          await Promise.race([aborted, new Promise((r) => setTimeout(r, 5000))]);
          if (held.signal.aborted) abortedAfter = performance.now() - killedAt;
          reason = held.signal.reason;
          assert.equal(await held.holding(), false);
        })
        .catch((e: unknown) => e);
      assert.ok(abortedAfter >= 0 && abortedAfter < 2000, `the body's signal aborted ${abortedAfter} ms after the termination`);
      assert.ok(reason instanceof advlock.LockLostError, String(reason));
      assert.ok(err instanceof advlock.LockLostError, String(err));
      assert.equal(err, reason); // the same news, with its cause
      assert.match(err.message, /^the session lock on advlock_key\('migrate', ''\) \(token \d+\) was lost: /);
      const cause = err.cause as { code?: string; message?: string };
      if (driver === "pg") {
        // node-postgres keeps the server's FATAL: the reason survives.
        assert.equal(cause.code, "57P01");
        assert.match(err.message, /terminating connection due to administrator command \(SQLSTATE 57P01\)/);
      } else {
        assert.equal(cause.code, "08006"); // postgres.js reports the close, not the server's reason
      }
      assert.deepEqual(await advisoryLocks(admin), []);
    });
  });
}

test("S41 idle-lock timeout 1 s server-wide: a session lock held 2.5 s stays; two pods running the README's migration pattern never overlap", async (t) => {
  if ((await serverKind()) !== "preloaded") {
    t.skip("advlock.idle_session_lock_timeout acts where advlock is loaded in every session: run on the preloaded instance");
    return;
  }
  const setting = async (): Promise<string> => {
    const c = await connect("setting-probe");
    try {
      return String(((await c.query({ text: "SHOW advlock.idle_session_lock_timeout", rowMode: "array" })).rows[0] as unknown[])[0]);
    } finally {
      await c.end();
    }
  };
  await withAdmin(async (admin) => {
    await admin.query("DROP TABLE IF EXISTS migration_runs");
    await admin.query("CREATE TABLE migration_runs (pod text, started timestamptz, ended timestamptz)");
    await admin.query("ALTER SYSTEM SET advlock.idle_session_lock_timeout = '1s'");
    await admin.query("SELECT pg_reload_conf()");
    try {
      await waitUntil(async () => (await setting()) === "1s", "new sessions to have the 1 s timeout");
      // The control: a plain connection idle with a session lock is terminated after 1 s.
      const plain = await connect("plain-holder");
      const plainErrors: { code?: string }[] = [];
      plain.on("error", (e) => plainErrors.push(e as { code?: string }));
      await plain.query("SELECT pg_advisory_lock(4242)");
      await waitUntil(() => plainErrors.some((e) => e.code === "57P05"), "the plain holder to be terminated (57P05)", 5000);
      await plain.end().catch(() => undefined);
      // Two pods, the README's pattern: a session lock around the migration, which runs on
      // another connection while the lock's connection sits idle for 2.5 s.
      const pod = async (name: string, driver: "pg" | "postgres"): Promise<void> => {
        const migration = await connect(`migration-${name}`);
        try {
          const held = await advlock.sessionLock(DSN, "migrate", "", { timeoutMs: 30_000, driver, applicationName: `lock-${name}` });
          try {
            await migration.query("INSERT INTO migration_runs VALUES ($1, clock_timestamp(), NULL)", [name]);
            await sleep(2500);
            assert.equal(held.signal.aborted, false, `${name}: the lock's connection was not terminated`);
            assert.equal(await held.holding(), true);
            await migration.query("UPDATE migration_runs SET ended = clock_timestamp() WHERE pod = $1", [name]);
          } finally {
            await held.release();
          }
        } finally {
          await migration.end();
        }
      };
      await Promise.all([pod("pod-a", "pg"), sleep(100).then(() => pod("pod-b", "postgres"))]);
      const runs = await admin.query({ text: "SELECT pod, started, ended FROM migration_runs ORDER BY started", rowMode: "array" });
      assert.equal(runs.rows.length, 2);
      const [first, second] = runs.rows as [string, Date, Date][];
      assert.ok(first && second && first[2] !== null && second[2] !== null, JSON.stringify(runs.rows));
      assert.ok(first[2].getTime() <= second[1].getTime(), `overlap: ${first[0]} ended at ${first[2].toISOString()}, ${second[0]} started at ${second[1].toISOString()}`);
    } finally {
      await admin.query("ALTER SYSTEM RESET advlock.idle_session_lock_timeout");
      await admin.query("SELECT pg_reload_conf()");
      await waitUntil(async () => (await setting()) === "0", "the timeout to be off again");
      await admin.query("DROP TABLE IF EXISTS migration_runs");
    }
  });
});

test("the id left out (options in its place) or the options left out: a TypeError naming the mistake, before any round trip", async () => {
  const unreachable = "postgresql://postgres@127.0.0.1:1/nowhere";
  const idLeftOut = (e: Error): boolean =>
    e instanceof TypeError && /^id must be a string, an integer number or a bigint, got an object: the id comes before the options \(for the empty id pass ""/.test(e.message);
  await assert.rejects(advlock.sessionLock(unreachable, "migrate", { timeoutMs: 1000 } as never, undefined as never), idLeftOut);
  await assert.rejects(advlock.withSessionLock(unreachable, "migrate", { timeoutMs: 1000 } as never, (() => undefined) as never, (() => undefined) as never), idLeftOut);
  const pool = new pg.Pool({ connectionString: unreachable });
  await assert.rejects(advlock.withLock(pool, "migrate", { timeoutMs: 1000 } as never, (() => undefined) as never, (() => undefined) as never), idLeftOut);
  await assert.rejects(advlock.lease(pool, "migrate", { ttlMs: 1000, timeoutMs: 0 } as never, (() => undefined) as never, (() => undefined) as never), idLeftOut);
  await pool.end();
  await assert.rejects(advlock.sessionLock(unreachable, "migrate", "", undefined as never), (e: Error) =>
    e instanceof TypeError && e.message === "options must be an object ({ timeoutMs, shared, applicationName, schema, driver, signal }), got undefined",
  );
});
