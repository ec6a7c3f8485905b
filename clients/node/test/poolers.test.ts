// sessionLock() through real PgBouncers: refused in transaction and statement mode (where a
// session lock would be shared with other clients), working in session mode, with both drivers
// (S17, S18), and never stranded on a pooled server session when no probe catches the pooler
// (S35). Transaction locks and leases, which need no session, go through either.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import pg from "pg";
import postgres from "postgres";
import * as advlock from "../src/index.js";
import { probing } from "../src/session.js";
import { type Bouncer, advisoryLocks, nothingLeftAfterEach, pgbouncer, serverKind, sleep, waitUntil, withAdmin } from "./helpers.js";

nothingLeftAfterEach();
const KEY = advlock.key("migrate").toString();
const DRIVERS = ["pg", "postgres"] as const;
const bouncers: Partial<Record<"transaction" | "statement" | "session", Bouncer>> = {};

before(async () => {
  bouncers.transaction = await pgbouncer("transaction");
  bouncers.statement = await pgbouncer("statement");
  bouncers.session = await pgbouncer("session");
});
after(async () => {
  for (const b of Object.values(bouncers)) await b.stop();
});

for (const mode of ["transaction", "statement"] as const) {
  for (const driver of DRIVERS) {
    test(`S17 ${mode}-mode PgBouncer (${driver}): sessionLock is refused with UnsafePoolerError naming what to use instead`, async () => {
      await withAdmin(async (admin) => {
        const dsn = (bouncers[mode] as Bouncer).dsn;
        await assert.rejects(advlock.sessionLock(dsn, "migrate", "", { timeoutMs: 1000, driver }), (e: Error) =>
          e instanceof advlock.UnsafePoolerError && /transaction or statement/.test(e.message) && /a pooler in session mode/.test(e.message),
        );
        assert.deepEqual(await advisoryLocks(admin), []);
      });
    });
  }
}

/**
 * Four workers (two per driver) each take sessionLock(dsn, "migrate") `rounds` times and stay
 * inside `holdMs`: each round's outcome ("held", "refused" for UnsafePoolerError, or
 * "<driver>: <error>" for any other) and the most workers ever inside at once. With
 * checkHolding, each holder asks holding() first ("held" only when it said true).
 */
async function race(
  dsn: string,
  rounds: number,
  timeoutMs: number,
  holdMs: number,
  checkHolding: boolean,
): Promise<{ outcomes: string[]; most: number }> {
  let inside = 0;
  let most = 0;
  const outcomes: string[] = [];
  const worker = async (driver: "pg" | "postgres"): Promise<void> => {
    for (let i = 0; i < rounds; i++) {
      try {
        let holding = true;
        await advlock.withSessionLock(dsn, "migrate", "", { timeoutMs, driver }, async (held) => {
          if (checkHolding) holding = await held.holding();
          inside += 1;
          most = Math.max(most, inside);
          await sleep(holdMs);
          inside -= 1;
        });
        outcomes.push(holding ? "held" : "held, but holding() said false");
      } catch (e) {
        outcomes.push(e instanceof advlock.UnsafePoolerError ? "refused" : `${driver}: ${String(e)}`);
      }
    }
  };
  await Promise.all([worker("pg"), worker("postgres"), worker("pg"), worker("postgres")]);
  return { outcomes, most };
}

test("S17 racing through a transaction-mode PgBouncer: held or refused, never lost, never two inside at once, nothing left locked", async () => {
  // LockLostError included among the failures: behind a pooler the lock stays on one backend.
  const { outcomes, most } = await race((bouncers.transaction as Bouncer).dsn, 3, 2000, 20, false);
  assert.equal(outcomes.length, 12);
  assert.deepEqual(
    outcomes.filter((o) => o !== "held" && o !== "refused"),
    [],
    outcomes.join("\n"),
  );
  assert.ok(most <= 1, String(most));
  assert.ok(outcomes.includes("refused"), outcomes.join());
  await withAdmin(async (admin) => waitUntil(async () => (await advisoryLocks(admin)).length === 0, "no advisory lock left"));
});

test("S35 with no probe catching it, racing through a transaction-mode PgBouncer: every round held, never two inside, no lock stranded", async () => {
  // No probe is conclusive (a busy pool hands it another backend). Here it never answers, as when
  // the pool is exhausted, so nothing refuses up front: workers take the lock through a
  // transaction pooler (pool size 2), wait for it and release it. The lock lives in the block
  // that pins the server session (whichever backend the block reached: it greets again), so every
  // round gets it, none is ever inside with another, none loses its lock, and
  // none is left on a server session the pool hands to the next client (0.5.0's first client left
  // it there when a statement landed on another backend: every later sessionLock timed out on a
  // lock held by an idle server connection).
  const probePid = probing.probePid;
  probing.probePid = async () => null;
  let raced: { outcomes: string[]; most: number };
  try {
    raced = await race((bouncers.transaction as Bouncer).dsn, 5, 5000, 10, true);
  } finally {
    probing.probePid = probePid;
  }
  const { outcomes, most } = raced;
  // Every round held: the block's backend never holds another client's lock (a pinned lock keeps
  // its server session out of the pool), so nothing refuses, and none is lost.
  assert.deepEqual(outcomes, Array(20).fill("held"), outcomes.join("\n"));
  assert.equal(most, 1);
  await withAdmin(async (admin) =>
    waitUntil(async () => (await advisoryLocks(admin)).length === 0, "no advisory lock stranded on a pooled server session", 5000),
  );
});

for (const driver of DRIVERS) {
  test(`S35 S17 statement-mode PgBouncer (${driver}) with no probe catching it: the pooler refuses the transaction block, UnsafePoolerError`, async () => {
    const dsn = (bouncers.statement as Bouncer).dsn;
    const probePid = probing.probePid;
    probing.probePid = async () => null;
    try {
      await assert.rejects(advlock.sessionLock(dsn, "migrate", "", { timeoutMs: 1000, driver }), (e: Error) =>
        e instanceof advlock.UnsafePoolerError && /the pooler refused a transaction block/.test(e.message) && /a pooler in session mode/.test(e.message),
      );
    } finally {
      probing.probePid = probePid;
    }
    await withAdmin(async (admin) => assert.deepEqual(await advisoryLocks(admin), []));
  });
}

for (const driver of DRIVERS) {
  test(`S18 session-mode PgBouncer (${driver}): the lock works, pid is the server backend, mutual exclusion holds`, async () => {
    await withAdmin(async (admin) => {
      const dsn = (bouncers.session as Bouncer).dsn;
      const first = await advlock.sessionLock(dsn, "migrate", "", { timeoutMs: 1000, driver, applicationName: "first" });
      try {
        assert.deepEqual(await advisoryLocks(admin, first.pid), [[first.pid, true, "ExclusiveLock", KEY]]);
        assert.equal(await first.holding(), true);
        const err = await advlock.sessionLock(dsn, "migrate", "", { timeoutMs: 300, driver }).catch((e: unknown) => e);
        assert.ok(err instanceof advlock.LockTimeoutError, String(err));
        assert.match(err.message, /within 300 ms: held by PID \d+/);
        assert.equal(err.pid, first.pid);
      } finally {
        await first.release();
      }
      await waitUntil(async () => (await advisoryLocks(admin)).length === 0, "the lock to be released");
    });
  });
}

test("S17 S33 through a transaction-mode PgBouncer, transaction locks and leases work (pg Pool, postgres.js)", async () => {
  const dsn = (bouncers.transaction as Bouncer).dsn;
  const pool = new pg.Pool({ connectionString: dsn, max: 2 });
  const sql = postgres(dsn, { max: 2, prepare: false });
  try {
    await withAdmin(async (admin) => {
      await advlock.withLock(pool, "account", 42, { timeoutMs: 1000 }, async () => {
        assert.equal((await advisoryLocks(admin)).length, 1);
      });
      await advlock.withLock(sql, "account", 42, { timeoutMs: 1000 }, async () => {
        assert.equal((await advisoryLocks(admin)).length, 1);
      });
      if ((await serverKind()) === "preloaded") {
        const token = await advlock.lease(pool, "report", "daily", { ttlMs: 600, timeoutMs: 1000 }, async (l) => {
          await waitUntil(() => l.renewals >= 2, "two renewals through the pooler");
          return l.token;
        });
        assert.ok(token > 0n);
      }
    });
  } finally {
    await pool.end();
    await sql.end();
  }
});

test("S43 nothing prepared behind a transaction-mode PgBouncer 1.18: 100 rounds of withLock, tryLock and holders on one connection, fences, a leader, and leases' renewals, with each driver's defaults", async () => {
  // One server connection behind the pooler: every statement of every client lands on it, so
  // its pg_prepared_statements lists every named statement anyone created.
  const bouncer = await pgbouncer("transaction", 1);
  const client = new pg.Client({ connectionString: bouncer.dsn });
  client.on("error", () => undefined);
  const sql = postgres(bouncer.dsn, { max: 1 }); // its defaults: prepare: true, fetch_types: true
  const named = async (): Promise<string[]> => {
    const r = await client.query({ text: "SELECT name FROM pg_prepared_statements WHERE statement ILIKE '%advlock%' ORDER BY name", rowMode: "array" });
    return r.rows.map((x) => String((x as unknown[])[0]));
  };
  try {
    await client.connect();
    // The check sees a named statement when there is one.
    await client.query({ name: "s43_control", text: "SELECT 'advlock control'" });
    assert.deepEqual(await named(), ["s43_control"]);
    await client.query("DEALLOCATE s43_control");
    for (let i = 0; i < 100; i++) {
      await advlock.withLock(client, "account", i, { timeoutMs: 1000 }, () => undefined);
      await client.query("BEGIN");
      assert.equal(await advlock.tryLock(client, "account", i), true);
      await client.query("COMMIT");
      assert.deepEqual(await advlock.holders(client, "account", i), []);
      await advlock.withLock(sql, "account", i, { timeoutMs: 1000 }, () => undefined);
      assert.equal(await sql.begin((tx) => advlock.tryLock(tx, "account", i)), true);
      assert.deepEqual(await advlock.holders(sql, "account", i), []);
    }
    // Fences pass in the write's transaction through the pooler too.
    await client.query("BEGIN");
    await advlock.fence(client, "s43", "fenced", 1n);
    await client.query("COMMIT");
    await sql.begin((tx) => advlock.fence(tx, "s43", "fenced", 2n));
    await withAdmin((admin) => admin.query("SELECT advlock_fence_reset('s43', 'fenced')"));
    if ((await serverKind()) === "preloaded") {
      const pool = new pg.Pool({ connectionString: bouncer.dsn });
      const pjs = postgres(bouncer.dsn);
      try {
        // A term of leadership, renewed and checked in a write's transaction, through the pooler.
        await advlock.leader(pjs, "s43", "leader", { candidate: "s43", ttlMs: 600, timeoutMs: 1000 }, async (term) => {
          await waitUntil(() => term.renewals >= 3 || term.signal.aborted, "three renewals of the term", 5000);
          await pjs.begin((tx) => advlock.leaseCheck(tx, term.term));
          term.check();
        });
        // A renewal every 150 ms (a third of the 450 ms renew deadline): 100 in about 15 s.
        const renewals = await Promise.all(
          ([pool, pjs] as const).map((src, n) =>
            advlock.lease(src, "report", `s43-${n}`, { ttlMs: 3000, renewDeadlineMs: 450, timeoutMs: 1000 }, async (l) => {
              await waitUntil(() => l.renewals >= 100 || l.signal.aborted, "100 renewals", 60_000);
              l.check();
              return l.renewals;
            }),
          ),
        );
        assert.ok(renewals.every((r) => r >= 100), String(renewals));
      } finally {
        await pool.end();
        await pjs.end();
      }
    }
    assert.deepEqual(await named(), []); // advlock's own statements created none
  } finally {
    await client.end().catch(() => undefined);
    await sql.end();
    await bouncer.stop();
  }
});
