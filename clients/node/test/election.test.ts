// Leader election and fences: leader() leads while it renews after a long campaign wait (S36),
// observe() wakes on a change (S37), a resignation hands over at once (S38), fence() and
// leaseCheck() refuse a stale writer inside its own transaction (S39), and elections say why
// they are unavailable (S29). Elections need advlock in shared_preload_libraries (run_tests.sh
// runs this file on its preloaded instance too); fences work on every server.
import assert from "node:assert/strict";
import { afterEach, test } from "node:test";
import pg from "pg";
import postgres from "postgres";
import * as advlock from "../src/index.js";
import { DSN, LEASES_SKIP, connect, leaseRows, serverKind, sleep, waitUntil, withAdmin } from "./helpers.js";

const kind = await serverKind();
const needsLeases = { skip: LEASES_SKIP[kind] };

afterEach(async () => {
  if (kind !== "preloaded") return;
  await withAdmin((admin) => waitUntil(async () => (await leaseRows(admin)).length === 0, "no row left in advlock_leases", 5000));
});

function pool(max = 2, app = "election-pool"): pg.Pool {
  return new pg.Pool({ connectionString: DSN, max, application_name: app });
}

/** The term the server reports leading (ns, id), or null. */
async function serverLeader(admin: pg.Client, ns: string, id: string): Promise<[string, string | null] | null> {
  const r = await admin.query({ text: "SELECT CAST(term AS text), candidate FROM advlock_leader($1, $2)", values: [ns, id], rowMode: "array" });
  return (r.rows[0] as [string, string | null] | undefined) ?? null;
}

test("S36 elected after a campaign wait longer than 2/3 of the TTL, the follower leads for three TTLs while it renews", needsLeases, async () => {
  const TTL = 2000;
  const p1 = pool(2, "leader-a");
  const p2 = pool(2, "leader-b");
  try {
    await withAdmin(async (admin) => {
      let elected = 0;
      let followerTerm = 0n;
      const sitting = advlock.leader(p1, "jobs", "beat", { candidate: "beat-0", ttlMs: TTL, timeoutMs: 0 }, async (term) => {
        await sleep(1600); // resigns after more than 2/3 of the TTL
        return term.term;
      });
      await waitUntil(async () => (await serverLeader(admin, "jobs", "beat"))?.[1] === "beat-0", "beat-0 to lead");
      const asked = performance.now();
      let waitedMs = 0;
      const renewals = await advlock.leader(p2, "jobs", "beat", { candidate: "beat-1", ttlMs: TTL, timeoutMs: 30_000 }, async (term) => {
        waitedMs = performance.now() - asked;
        elected += 1;
        followerTerm = term.term;
        assert.equal(term.token, term.term);
        assert.equal(term.candidate, "beat-1");
        const started = performance.now();
        while (performance.now() - started < 3 * TTL) {
          term.check(); // never lost
          assert.deepEqual(await serverLeader(admin, "jobs", "beat"), [followerTerm.toString(), "beat-1"]); // the same term throughout
          await sleep(100);
        }
        assert.equal(term.lost, null);
        assert.equal(term.signal.aborted, false);
        return term.renewals;
      });
      const sittingTerm = await sitting; // the sitting leader resigned, not lost
      assert.equal(elected, 1); // the body (the "started" callback) ran once
      assert.ok(followerTerm > sittingTerm);
      assert.ok(waitedMs > (2 * TTL) / 3, `elected after ${waitedMs} ms`);
      assert.ok(renewals >= 12, `${renewals} renewals in three TTLs`);
      assert.equal(await serverLeader(admin, "jobs", "beat"), null); // resigned at the end
    });
  } finally {
    await p1.end();
    await p2.end();
  }
});

for (const source of ["pg", "postgres"] as const) {
  test(`S37 ${source}: observe yields the leader at once, then each change within 2 s, null while nobody leads`, needsLeases, async () => {
    const observerPool = source === "pg" ? pool(2, "observer") : postgres(DSN, { max: 2 });
    const candidates = pool(2, "candidate-app");
    const seen: { at: number; leader: advlock.Leader | null }[] = [];
    const ac = new AbortController();
    const following = (async () => {
      for await (const l of advlock.observe(observerPool, "jobs", "observed", { signal: ac.signal })) seen.push({ at: performance.now(), leader: l });
    })().catch((e: unknown) => e);
    try {
      await waitUntil(() => seen.length === 1, "the first value");
      assert.equal(seen[0]?.leader, null); // nobody leads yet: null at once
      // A term begins: seen within 2 s (each wait is 30 s on the server: this is the change waking it).
      let began = 0;
      const first = await advlock.leader(candidates, "jobs", "observed", { candidate: "pod-a", ttlMs: 10_000, timeoutMs: 0 }, async (term) => {
        began = performance.now();
        await waitUntil(() => seen.length === 2, "the new leader", 5000);
        return term.term;
      });
      const resignedAt = performance.now();
      const a = seen[1] as { at: number; leader: advlock.Leader | null };
      assert.ok(a.at - began < 2000, `seen ${a.at - began} ms after the term began`);
      assert.equal(a.leader?.term, first);
      assert.equal(a.leader?.candidate, "pod-a");
      assert.equal(a.leader?.applicationName, "candidate-app");
      assert.ok(a.leader?.expiresAt instanceof Date && a.leader.since instanceof Date && typeof a.leader.pid === "number");
      // The resignation: nobody leads, seen within 2 s.
      await waitUntil(() => seen.length === 3, "no leader after the resignation", 5000);
      assert.equal(seen[2]?.leader, null);
      assert.ok((seen[2] as { at: number }).at - resignedAt < 2000);
      // A new term, larger.
      const second = await advlock.leader(candidates, "jobs", "observed", { candidate: "pod-b", ttlMs: 10_000, timeoutMs: 0 }, async (term) => {
        await waitUntil(() => seen.length === 4, "the next leader", 5000);
        return term.term;
      });
      assert.equal(seen[3]?.leader?.term, second);
      assert.ok(second > first);
      // knownTerm: a term the caller knows is not yielded again first.
      await advlock.leader(candidates, "jobs", "other", { candidate: "pod-c", ttlMs: 10_000, timeoutMs: 0 }, async (term) => {
        const stop = new AbortController();
        const it = advlock.observe(observerPool, "jobs", "other", { knownTerm: term.term, waitMs: 200, signal: stop.signal });
        const next = it.next().catch((e: unknown) => e);
        // Its waits (200 ms each on the server) run out unchanged and it waits again: nothing yielded.
        assert.equal(await Promise.race([next, sleep(700).then(() => "still waiting")]), "still waiting");
        stop.abort(); // ends the wait on the server
        assert.equal(((await next) as Error).name, "AbortError");
      });
    } finally {
      ac.abort();
      const ended = await following;
      assert.ok(ended === undefined || (ended as Error).name === "AbortError", String(ended));
      await candidates.end();
      await (observerPool as { end(): Promise<void> }).end();
    }
  });
}

test("S38 a leader leaving its block resigns at once: the waiting candidate is elected within 1 s with a larger term; the old leader is not lost", needsLeases, async () => {
  const p1 = pool(2, "leader-a");
  const p2 = pool(2, "leader-b");
  try {
    await withAdmin(async (admin) => {
      let electedAt = 0;
      let waiting: Promise<bigint> | undefined;
      const oldTerm = await advlock.leader(p1, "jobs", "handover", { candidate: "a", ttlMs: 30_000, timeoutMs: 0 }, async (term) => {
        waiting = advlock.leader(p2, "jobs", "handover", { candidate: "b", ttlMs: 30_000, timeoutMs: 20_000 }, (next) => {
          electedAt = performance.now();
          return next.term;
        });
        await waitUntil(async () => (await leaseRows(admin)).some((r) => !r[1]), "b to wait");
        return term.term;
      });
      const resignedAt = performance.now();
      const newTerm = await (waiting as Promise<bigint>);
      assert.ok(newTerm > oldTerm);
      assert.ok(electedAt - resignedAt < 1000, `elected ${electedAt - resignedAt} ms after the resignation`);
    });
  } finally {
    await p1.end();
    await p2.end();
  }
});

test("S39 fence: the newest token passes and is recorded; a smaller one is refused (LK001) and the write rolled back", async () => {
  const c = await connect("fenced-writer");
  const sql = postgres(DSN, { max: 1 });
  try {
    await withAdmin(async (admin) => {
      await admin.query("DROP TABLE IF EXISTS fenced_invoices");
      await admin.query("CREATE TABLE fenced_invoices (id int PRIMARY KEY, body text)");
      await admin.query("INSERT INTO fenced_invoices VALUES (1, 'initial')");
      const k = advlock.key("invoices", "march").toString();
      await c.query("BEGIN");
      await advlock.fence(c, "invoices", "march", 42n);
      await c.query("UPDATE fenced_invoices SET body = 'by 42' WHERE id = 1");
      await c.query("COMMIT");
      const rec = await admin.query({ text: "SELECT CAST(token AS text) FROM advlock_fences WHERE key = $1", values: [k], rowMode: "array" });
      assert.deepEqual(rec.rows, [["42"]]);
      // A stale writer (node-postgres): its write, then the fence, which refuses it.
      await c.query("BEGIN");
      await c.query("UPDATE fenced_invoices SET body = 'by 41' WHERE id = 1");
      const err = await advlock.fence(c, "invoices", "march", 41).catch((e: unknown) => e);
      await c.query("ROLLBACK");
      assert.ok(err instanceof advlock.FenceRefusedError, String(err));
      assert.equal((err.cause as { code?: string }).code, "LK001");
      assert.match(err.message, new RegExp(`fence of key ${k} = advlock_key\\('invoices', 'march'\\) refused token 41: token 42 has passed it`));
      assert.equal(err.token, 41n);
      assert.equal(err.passed, 42n);
      // The same with postgres.js, in sql.begin: the transaction is rolled back.
      await assert.rejects(
        sql.begin(async (tx) => {
          await tx`UPDATE fenced_invoices SET body = 'by 40' WHERE id = 1`;
          await advlock.fence(tx, "invoices", "march", 40n);
        }),
        (e: Error) => e instanceof advlock.FenceRefusedError && e.passed === 42n,
      );
      const body = await admin.query({ text: "SELECT body FROM fenced_invoices", rowMode: "array" });
      assert.deepEqual(body.rows, [["by 42"]]);
      // Outside a transaction, or on a pool: refused before any round trip, naming what to pass.
      await assert.rejects(advlock.fence(c, "invoices", "march", 43n), (e: Error) =>
        e instanceof advlock.NotInTransactionError && /records its token with the write transaction/.test(e.message) && /BEGIN/.test(e.message),
      );
      const p = pool(1);
      await assert.rejects(advlock.fence(p, "invoices", "march", 43n), (e: Error) => e instanceof advlock.NotInTransactionError && /pool/.test(e.message));
      await p.end();
      await assert.rejects(advlock.fence(c, "invoices", "march", 0n), (e: Error) => e instanceof RangeError && /^token must be a positive bigint/.test(e.message));
      await assert.rejects(advlock.fence(c, "invoices", "march", "42" as never), (e: Error) => e instanceof TypeError && /^token must be a fencing token/.test(e.message));
      await admin.query("SELECT advlock_fence_reset('invoices', 'march')");
      await admin.query("DROP TABLE fenced_invoices");
    });
  } finally {
    await c.end();
    await sql.end();
  }
});

test("S39 leaseCheck passes in the write's transaction while the lease is held and raises LeaseNotHeldError (LK002) once it has ended", needsLeases, async () => {
  const p = pool(2);
  const c = await connect("lease-checker");
  const sql = postgres(DSN, { max: 1 });
  try {
    const token = await advlock.lease(p, "report", "daily", { ttlMs: 30_000, timeoutMs: 0 }, async (l) => {
      await c.query("BEGIN");
      await advlock.leaseCheck(c, l.token);
      await c.query("COMMIT");
      await sql.begin((tx) => advlock.leaseCheck(tx, l.token));
      return l.token;
    });
    await c.query("BEGIN");
    const err = await advlock.leaseCheck(c, token).catch((e: unknown) => e);
    await c.query("ROLLBACK");
    assert.ok(err instanceof advlock.LeaseNotHeldError && err instanceof advlock.LeaseLostError, String(err));
    assert.equal((err.cause as { code?: string }).code, "LK002");
    await assert.rejects(
      sql.begin((tx) => advlock.leaseCheck(tx, token)),
      advlock.LeaseNotHeldError,
    );
  } finally {
    await p.end();
    await c.end();
    await sql.end();
  }
});

test("S29 elections unavailable say why: leader, observe and leaseCheck raise NotPreloadedError / LeasesUnavailableError", { skip: kind === "preloaded" && "elections work on this server (the other two runs check the errors)" }, async () => {
  const p = pool(1);
  const c = await connect();
  try {
    const errors = [
      await advlock.leader(p, "jobs", "beat", { candidate: "x", ttlMs: 10_000, timeoutMs: 0 }, () => undefined).catch((e: unknown) => e),
      await advlock.observe(p, "jobs", "beat").next().catch((e: unknown) => e),
    ];
    await c.query("BEGIN");
    errors.push(await advlock.leaseCheck(c, 1n).catch((e: unknown) => e));
    await c.query("ROLLBACK");
    for (const err of errors) {
      if (kind === "extension") {
        assert.ok(err instanceof advlock.NotPreloadedError, String(err));
        assert.match(err.message, /add advlock to shared_preload_libraries/);
      } else {
        assert.ok(err instanceof advlock.LeasesUnavailableError && !(err instanceof advlock.NotPreloadedError), String(err));
        assert.match(err.message, /the SQL edition has none/);
      }
    }
  } finally {
    await p.end();
    await c.end();
  }
});

test("leader and observe check their arguments before any round trip", async () => {
  const p = pool(1);
  const opts = { candidate: "pod-1", ttlMs: 10_000, timeoutMs: 0 };
  const run = (o: object): Promise<unknown> => advlock.leader(p, "jobs", "beat", o as never, () => undefined);
  await assert.rejects(run({ ttlMs: 10_000, timeoutMs: 0 }), (e: Error) => e instanceof TypeError && /^candidate is required/.test(e.message));
  await assert.rejects(run({ ...opts, candidate: "" }), (e: Error) => e instanceof RangeError && /^candidate must be 1 to 128 bytes/.test(e.message));
  await assert.rejects(run({ ...opts, candidate: "a\nb" }), (e: Error) => e instanceof RangeError && /control characters/.test(e.message));
  await assert.rejects(run({ ...opts, candidate: 7 }), (e: Error) => e instanceof TypeError && /^candidate must be a string/.test(e.message));
  await assert.rejects(run({ ...opts, slots: 2 }), (e: Error) => e instanceof TypeError && /options\.slots is not an option of leader/.test(e.message));
  assert.throws(() => advlock.observe(p, "jobs", "beat", { waitMs: 0 }), (e: Error) => e instanceof RangeError && /^waitMs must be a positive/.test(e.message));
  assert.throws(() => advlock.observe(p, "jobs", "beat", { knownTerm: "1" as never }), (e: Error) => e instanceof TypeError && /^knownTerm must be a term/.test(e.message));
  assert.throws(() => advlock.observe(DSN as never, "jobs"), (e: Error) => e instanceof TypeError && /^pool: expected/.test(e.message));
  await p.end();
});
