// Leases on pools (node-postgres Pool, postgres.js sql): taken, renewed on several pooled
// backends, released at the end; lost (released by someone else, or the renew deadline passed
// while renewals were blocked) aborts the body's signal; fenced writes; timeouts, slots,
// cancelled waits, CIC, sources and servers without leases (S21-S30). Leases need advlock in
// shared_preload_libraries: run_tests.sh runs this file on its preloaded instance too.
import assert from "node:assert/strict";
import { afterEach, test } from "node:test";
import pg from "pg";
import postgres from "postgres";
import * as advlock from "../src/index.js";
import { DSN, LEASES_SKIP, type PgClient, connect, leaseRows, serverKind, sleep, waitUntil, withAdmin } from "./helpers.js";

const kind = await serverKind();
const needsLeases = { skip: LEASES_SKIP[kind] };

afterEach(async () => {
  if (kind !== "preloaded") return;
  await withAdmin((admin) => waitUntil(async () => (await leaseRows(admin)).length === 0, "no row left in advlock_leases", 5000));
});

function pool(max = 2, app = "lease-pool"): pg.Pool {
  return new pg.Pool({ connectionString: DSN, max, application_name: app });
}

async function renewedBy(admin: pg.Client, token: bigint, since: Date): Promise<number> {
  return waitUntil(async () => {
    const r = await admin.query({
      text: "SELECT pid FROM advlock_leases WHERE lease = $1 AND renewed_at > $2",
      values: [token.toString(), since],
      rowMode: "array",
    });
    return r.rows.length ? Number((r.rows[0] as unknown[])[0]) : 0;
  }, "a renewal", 5000);
}

const releaseAll = (admin: pg.Client): Promise<unknown> => admin.query("SELECT advlock_lease_release(lease) FROM advlock_leases WHERE granted");

test("S21 a pg Pool lease renews on two backends and is released at the end", needsLeases, async () => {
  await withAdmin(async (admin) => {
    const p = pool(2);
    const l = await advlock.lease(p, "report", "daily", { ttlMs: 600, timeoutMs: 1000 }, async (lease) => {
      assert.ok(lease.token > 0n && lease.lost === null);
      const rows = await leaseRows(admin);
      assert.deepEqual(rows.map((r) => [r[0], r[1]]), [[lease.token.toString(), true]]);
      // While the test holds one connection the renewals must use the other; then it holds that
      // other one, and the renewals must move to the first: two backends renewed.
      const x = (await p.connect()) as unknown as PgClient & pg.PoolClient;
      const first = await renewedBy(admin, lease.token, new Date());
      assert.notEqual(first, x.processID);
      const y = (await p.connect()) as unknown as PgClient & pg.PoolClient;
      assert.equal(y.processID, first);
      x.release();
      const second = await renewedBy(admin, lease.token, new Date());
      assert.equal(second, x.processID);
      y.release();
      lease.check();
      return lease;
    });
    assert.ok(l.lost === null && l.renewals >= 2);
    assert.deepEqual(await leaseRows(admin), []); // released, renewals stopped
    await sleep(300);
    assert.deepEqual(await leaseRows(admin), []);
    await p.end();
  });
});

test("S21 S30 a postgres.js sql carries a lease too", needsLeases, async () => {
  await withAdmin(async (admin) => {
    const sql = postgres(DSN, { max: 2 });
    const token = await advlock.lease(sql, "report", "pjs", { ttlMs: 600, timeoutMs: 1000 }, async (lease) => {
      await waitUntil(() => lease.renewals >= 2, "two renewals");
      assert.equal((await leaseRows(admin)).length, 1);
      return lease.token;
    });
    assert.ok(token > 0n);
    assert.deepEqual(await leaseRows(admin), []);
    await sql.end();
  });
});

test("S22 released whatever happens: an error in the body, or the caller's signal aborting it", needsLeases, async () => {
  await withAdmin(async (admin) => {
    const p = pool(1);
    const boom = new Error("boom");
    await assert.rejects(advlock.lease(p, "report", "boom", { ttlMs: 5000, timeoutMs: 1000 }, () => Promise.reject(boom)), (e) => e === boom);
    assert.deepEqual(await leaseRows(admin), []);
    const ac = new AbortController();
    const body = advlock.lease(p, "report", "boom", { ttlMs: 5000, timeoutMs: 1000, signal: ac.signal }, async (lease) => {
      await new Promise((resolve) => lease.signal.addEventListener("abort", resolve));
      throw lease.signal.reason;
    });
    await waitUntil(async () => (await leaseRows(admin)).length === 1, "the lease");
    ac.abort();
    await assert.rejects(body, { name: "AbortError" });
    assert.deepEqual(await leaseRows(admin), []);
    await p.end();
  });
});

test("S23 a lease released by someone else aborts the body's signal; LeaseLostError even if the body swallowed it", needsLeases, async () => {
  await withAdmin(async (admin) => {
    const p = pool(2);
    const started = performance.now();
    let reachedEnd = false;
    let seen: advlock.Lease | undefined;
    await assert.rejects(
      advlock.lease(p, "report", "daily", { ttlMs: 300, timeoutMs: 1000 }, async (lease) => {
        seen = lease;
        await releaseAll(admin);
        await new Promise((resolve) => lease.signal.addEventListener("abort", resolve)); // aborted by the next renewal
        assert.ok(lease.signal.reason instanceof advlock.LeaseLostError);
        assert.throws(() => lease.check(), advlock.LeaseLostError);
        reachedEnd = true; // the body swallows it and returns normally
      }),
      (e: Error) => e instanceof advlock.LeaseLostError && e instanceof advlock.LockLostError && /returned false/.test(e.message),
    );
    assert.ok(reachedEnd && performance.now() - started < 5000);
    assert.ok(seen?.lost !== null);
    await p.end();
  });
});

test("S24 renewals blocked: the body is stopped at the renew deadline, before a contender is granted; the lease runs out at its TTL", needsLeases, async () => {
  await withAdmin(async (admin) => {
    await admin.query("DROP TABLE IF EXISTS lease_body_writes");
    await admin.query("CREATE UNLOGGED TABLE lease_body_writes (at timestamptz NOT NULL)");
    const p = pool(1);
    const writer = await connect("writer");
    const contenderConn = await connect("contender");
    let granted: { id: string; at: Date } | undefined;
    let contender: Promise<void> | undefined;
    let checkedAt = 0;
    let token = 0n;
    await assert.rejects(
      advlock.lease(p, "report", "daily", { ttlMs: 600, timeoutMs: 1000 }, async (lease) => {
        token = lease.token;
        contender = contenderConn
          .query({
            text: "WITH l AS MATERIALIZED (SELECT advlock_lease('report', 'daily', 5000, 10000) AS id) SELECT CAST(id AS text), clock_timestamp() FROM l",
            rowMode: "array",
          })
          .then(async (r) => {
            const [id, at] = r.rows[0] as [string, Date];
            granted = { id, at };
            await contenderConn.query("SELECT advlock_lease_release($1)", [id]);
          });
        const only = await p.connect(); // renewals now wait for a connection that never comes
        const started = performance.now();
        try {
          while (!lease.signal.aborted) {
            await writer.query("INSERT INTO lease_body_writes VALUES (clock_timestamp())");
            await sleep(2);
          }
          checkedAt = performance.now() - started;
          assert.throws(() => lease.check(), (e: Error) => e instanceof advlock.LeaseLostError && /before the renew deadline \(400 ms/.test(e.message));
        } finally {
          only.release();
        }
      }),
      (e: Error) => e instanceof advlock.LeaseLostError && /no pooled connection/.test(e.message),
    );
    assert.ok(checkedAt < 600, `stopped ${checkedAt} ms after the renewals were blocked`);
    // Not released: left to run out on the server at its TTL.
    const row = (await leaseRows(admin)).find((r) => r[0] === token.toString());
    assert.ok(row === undefined || row[1] === true);
    await contender;
    const last = (await admin.query({ text: "SELECT max(at) FROM lease_body_writes", rowMode: "array" })).rows[0] as [Date];
    assert.ok(granted && BigInt(granted.id) > token);
    assert.ok(granted.at.getTime() > last[0].getTime(), `the body wrote at ${last[0].toISOString()}, after the contender's grant at ${granted.at.toISOString()}`);
    await writer.end();
    await contenderConn.end();
    await admin.query("DROP TABLE lease_body_writes");
    await p.end();
  });
});

test("S25 the next holder's fenced write wins over the stale one", needsLeases, async () => {
  await withAdmin(async (admin) => {
    await admin.query("DROP TABLE IF EXISTS report_output");
    await admin.query("CREATE TABLE report_output (id int PRIMARY KEY, fence bigint NOT NULL, body text)");
    await admin.query("INSERT INTO report_output VALUES (1, 0, NULL)");
    const FENCED = "UPDATE report_output SET fence = $1, body = $2 WHERE id = 1 AND fence < $1";
    const pa = pool(2, "worker-a");
    const pb = pool(2, "worker-b");
    let fresh = 0n;
    await assert.rejects(
      advlock.lease(pa, "report", "daily", { ttlMs: 300, timeoutMs: 1000 }, async (stale) => {
        await releaseAll(admin); // worker A "paused": its lease ends behind its back
        await advlock.lease(pb, "report", "daily", { ttlMs: 2000, timeoutMs: 1000 }, async (l) => {
          fresh = l.token;
          assert.ok(fresh > stale.token);
          assert.equal((await pb.query(FENCED, [fresh.toString(), "b"])).rowCount, 1);
          assert.equal((await pa.query(FENCED, [stale.token.toString(), "a"])).rowCount, 0); // changes nothing
        });
      }),
      advlock.LeaseLostError,
    );
    const r = await admin.query({ text: "SELECT CAST(fence AS text), body FROM report_output", rowMode: "array" });
    assert.deepEqual(r.rows, [[fresh.toString(), "b"]]);
    await admin.query("DROP TABLE report_output");
    await pa.end();
    await pb.end();
  });
});

test("S26 a busy key: LeaseTimeoutError names the holders after the timeout; slots", needsLeases, async () => {
  const ph = pool(1, "holder");
  const pw = pool(1, "waiter");
  await advlock.lease(ph, "report", "daily", { ttlMs: 5000, timeoutMs: 0 }, async () => {
    const started = performance.now();
    const err = await advlock.lease(pw, "report", "daily", { ttlMs: 5000, timeoutMs: 200 }, () => assert.fail("must not get it")).catch((e: unknown) => e);
    const took = performance.now() - started;
    assert.ok(err instanceof advlock.LeaseTimeoutError && err instanceof advlock.LockTimeoutError, String(err));
    assert.match(err.message, /within 200 ms: held by PID \d+ \(application_name "holder"\)/);
    assert.equal(err.applicationName, "holder");
    assert.ok(took > 150 && took < 2000, String(took));
  });
  await advlock.lease(ph, "reports", "running", { ttlMs: 5000, timeoutMs: 0, slots: 2 }, async (one) => {
    await advlock.lease(pw, "reports", "running", { ttlMs: 5000, timeoutMs: 0, slots: 2 }, async (two) => {
      assert.notEqual(one.token, two.token);
      const err = await advlock.lease(pw, "reports", "running", { ttlMs: 5000, timeoutMs: 0, slots: 2 }, () => undefined).catch((e: unknown) => e);
      assert.ok(err instanceof advlock.LeaseTimeoutError);
      assert.match(err.message, /\(2 slots\)/);
      assert.equal(err.holders.length, 2);
    });
  });
  await ph.end();
  await pw.end();
});

for (const source of ["pg", "postgres"] as const) {
  test(`S27 ${source}: an AbortSignal cancels a waiting lease: no waiter left, the holder keeps it, the pool works`, needsLeases, async () => {
    await withAdmin(async (admin) => {
      const ph = pool(1, "holder");
      const src = source === "pg" ? pool(1, "waiter") : postgres(DSN, { max: 1 });
      let heldToken = 0n;
      await advlock.lease(ph, "report", "daily", { ttlMs: 10_000, timeoutMs: 0 }, async (held) => {
        heldToken = held.token;
        const ac = new AbortController();
        const wait = advlock.lease(src, "report", "daily", { ttlMs: 5000, timeoutMs: 30_000, signal: ac.signal }, () => assert.fail("must not get it"));
        await waitUntil(async () => (await leaseRows(admin)).some((r) => !r[1]), "the waiter to queue");
        ac.abort();
        await assert.rejects(wait, { name: "AbortError" });
        await waitUntil(async () => !(await leaseRows(admin)).some((r) => !r[1]), "the waiter row to go", 2000);
        assert.deepEqual((await leaseRows(admin)).map((r) => r[0]), [held.token.toString()]);
      });
      const next = await advlock.lease(src, "report", "daily", { ttlMs: 5000, timeoutMs: 1000 }, (l) => l.token);
      assert.ok(next > heldToken);
      await ph.end();
      await (src as { end(): Promise<void> }).end();
    });
  });
}

test("S28 a waiting lease does not stall CREATE INDEX CONCURRENTLY (CALL advlock_wait_lease holds no snapshot)", needsLeases, async () => {
  await withAdmin(async (admin) => {
    await admin.query("DROP TABLE IF EXISTS cic_target");
    await admin.query("CREATE TABLE cic_target AS SELECT g AS id FROM generate_series(1, 1000) g");
    const p1 = pool(2);
    const p2 = pool(2, "lease-pod2");
    let took = 0;
    let pod2: Promise<bigint> | undefined;
    await advlock.lease(p1, "migrate", "", { ttlMs: 30_000, timeoutMs: 1000 }, async () => {
      pod2 = advlock.lease(p2, "migrate", "", { ttlMs: 30_000, timeoutMs: 20_000 }, (l) => l.token);
      const row = await waitUntil(async () => {
        const r = await admin.query({
          text:
            "SELECT backend_xmin IS NULL FROM pg_stat_activity WHERE application_name = 'lease-pod2'" +
            " AND state = 'active' AND query LIKE 'CALL %advlock_wait_lease%'",
          rowMode: "array",
        });
        return r.rows[0] as [boolean] | undefined;
      }, "pod 2 to wait in CALL advlock_wait_lease");
      assert.deepEqual(row, [true]);
      const migration = await connect("pod1-migration");
      const started = performance.now();
      await migration.query("CREATE INDEX CONCURRENTLY cic_target_id ON cic_target (id)");
      took = performance.now() - started;
      await migration.end();
    });
    assert.ok(pod2 !== undefined && (await pod2) > 0n);
    assert.ok(took < 5000, `CREATE INDEX CONCURRENTLY took ${took} ms`);
    await admin.query("DROP TABLE cic_target");
    await p1.end();
    await p2.end();
  });
});

test("S29 leases unavailable say why: NotPreloadedError on the extension, LeasesUnavailableError on the SQL edition", { skip: kind === "preloaded" && "leases work on this server (the other two runs check the errors)" }, async () => {
  const p = pool(1);
  const sql = postgres(DSN, { max: 1 });
  for (const src of [p, sql]) {
    const err = await advlock.lease(src, "report", "daily", { ttlMs: 30_000, timeoutMs: 1000 }, () => undefined).catch((e: unknown) => e);
    if (kind === "extension") {
      assert.ok(err instanceof advlock.NotPreloadedError && err instanceof advlock.LeasesUnavailableError, String(err));
      assert.match(err.message, /add advlock to shared_preload_libraries/);
      assert.equal((err.cause as { code?: string }).code, "55000");
    } else {
      assert.ok(err instanceof advlock.LeasesUnavailableError && !(err instanceof advlock.NotPreloadedError), String(err));
      assert.match(err.message, /the SQL edition has none/);
    }
  }
  await p.end();
  await sql.end();
});

test("S30 lease sources: a connection string, a client or a transaction is refused naming what to pass", async () => {
  const c = await connect();
  const sql = postgres(DSN, { max: 1 });
  const lease = (src: unknown): Promise<unknown> => advlock.lease(src as never, "report", "", { ttlMs: 30_000, timeoutMs: 1000 }, () => undefined);
  await assert.rejects(lease(DSN), (e: Error) => e instanceof TypeError && /^pool: expected/.test(e.message));
  await assert.rejects(lease(c), (e: Error) => e instanceof TypeError && /^pool: pass the pool/.test(e.message));
  await sql.begin(async (tx) => {
    await assert.rejects(lease(tx), (e: Error) => e instanceof TypeError && /^pool: pass the pool/.test(e.message));
  });
  await c.end();
  await sql.end();
});

/** Hold `slots` leases on (ns, id) from `source` for `holdMs`, then release them. */
async function holdFor(source: advlock.LeaseSource, id: string, slots: number, holdMs: number): Promise<void> {
  const hold = (n: number): Promise<void> =>
    advlock.lease(source, "report", id, { ttlMs: 10_000, timeoutMs: 0, slots }, async () => {
      if (n > 1) await hold(n - 1);
      else await sleep(holdMs);
    });
  await hold(slots);
}

test("S40 a lease (pg Pool) and a semaphore slot (postgres.js) granted after a wait longer than 2/3 of the TTL are kept while they renew", needsLeases, async () => {
  const holders = pool(3, "s40-holder");
  const pgPool = pool(2, "s40-waiter");
  const sql = postgres(DSN, { max: 2 });
  const TTL = 3000;
  const waiter = async (source: advlock.LeaseSource, id: string, slots: number): Promise<{ waitedMs: number; renewals: number; ranMs: number }> => {
    await sleep(200); // the holders first
    const asked = performance.now();
    let waitedMs = 0;
    let ranMs = 0;
    const renewals = await advlock.lease(source, "report", id, { ttlMs: TTL, timeoutMs: 10_000, slots }, async (l) => {
      waitedMs = performance.now() - asked;
      const started = performance.now();
      while (performance.now() - started < 3 * TTL) {
        l.check(); // never lost: every renewal returned true
        await sleep(100);
      }
      ranMs = performance.now() - started;
      assert.equal(l.lost, null);
      assert.equal(l.signal.aborted, false);
      return l.renewals;
    });
    return { waitedMs, renewals, ranMs };
  };
  try {
    const [, , one, slot] = await Promise.all([
      holdFor(holders, "s40", 1, 2700),
      holdFor(holders, "s40-slots", 2, 2700),
      waiter(pgPool, "s40", 1),
      waiter(sql, "s40-slots", 2),
    ]);
    for (const r of [one, slot]) {
      assert.ok(r.waitedMs > (2 * TTL) / 3, `granted after ${r.waitedMs} ms: more than 2/3 of the TTL`);
      assert.ok(r.ranMs >= 3 * TTL, String(r.ranMs));
      // Renewed every third of the 2 s renew deadline for 9 s: at least a dozen times.
      assert.ok(r.renewals >= 12, `${r.renewals} renewals`);
    }
    await withAdmin(async (admin) => assert.deepEqual(await leaseRows(admin), []));
  } finally {
    await holders.end();
    await pgPool.end();
    await sql.end();
  }
});
