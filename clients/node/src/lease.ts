// Leases: locks owned by their id, not by a connection (advlock_lease; needs advlock preloaded).
//
// A lease is taken with one statement on any connection and renewed and released with others,
// so unlike a session lock it belongs on a pool: every statement here borrows a pooled
// connection for just that statement. lease() renews in the background, aborts the body's
// AbortSignal when the lease is lost or its renew deadline passes, and releases it at the end.
import { INT4_MAX, checkFn, checkOptions, checkSchema, checkSignal, ms, toBigInt } from "./args.js";
import { type PgPoolLike, type PostgresJsLike, type Row, kindOf, pgRun, pjsRun, prefixFor, qualify } from "./driver.js";
import {
  type Holder,
  LeaseLostError,
  LeaseTimeoutError,
  LeasesUnavailableError,
  NotPreloadedError,
  isConnectionError,
  sqlstate,
} from "./errors.js";
import { type Id, checkNs, describe, idText, keyOf } from "./key.js";

const ACQUIRE =
  "SELECT CAST(@.advlock_lease(CAST($1 AS text), CAST($2 AS text), CAST($3 AS int4), CAST($4 AS int4), slots => CAST($5 AS int4)) AS text)";
// The wait, when the key is busy: commits first and holds no snapshot while it waits.
const WAIT = "CALL @.advlock_wait_lease(CAST($1 AS int8), CAST($2 AS int4), CAST($3 AS int4), CAST($4 AS int4))";
const RENEW = "SELECT @.advlock_lease_renew(CAST($1 AS int8), CAST($2 AS int4))";
const RELEASE = "SELECT @.advlock_lease_release(CAST($1 AS int8))";
const WHO = "SELECT pid, application_name FROM @.advlock_leases WHERE key = CAST($1 AS int8) AND granted ORDER BY lease";
// After a wait: how long until the lease runs out, by the server's clock (its expires_at, the
// grant's time plus the TTL, measured against clock_timestamp()). No row: it has already ended.
const UNTIL_EXPIRY =
  "SELECT CAST(EXTRACT(EPOCH FROM expires_at - pg_catalog.clock_timestamp()) * 1000 AS float8)" +
  " FROM @.advlock_leases WHERE lease = CAST($1 AS int8) AND granted";

export interface LeaseOptions {
  /** How long the lease lasts on the server without a renewal, in milliseconds. */
  ttlMs: number;
  /** The longest wait for the lease, in milliseconds (0: no wait). */
  timeoutMs: number;
  /** Up to `slots` leases hold the key at once (a semaphore); default 1. */
  slots?: number;
  /** The body is stopped (its signal aborted) this long after the last successful renewal was
   * sent, before the server's TTL runs out; default two thirds of ttlMs. */
  renewDeadlineMs?: number;
  /** The schema advlock is installed in (default: found once per connection). */
  schema?: string;
  /** Aborting it cancels the wait, or aborts the body's signal. */
  signal?: AbortSignal;
}

const OPTIONS = ["ttlMs", "timeoutMs", "slots", "renewDeadlineMs", "schema", "signal"] as const;

/** A pool a lease runs on: a node-postgres Pool or a postgres.js sql. */
export type LeaseSource = PgPoolLike | PostgresJsLike;

/** What the body of lease() gets. */
export interface Lease {
  /** The lease id, also its fencing token (larger for every later lease). */
  readonly token: bigint;
  readonly key: bigint;
  /** Aborted when the lease is lost or its renew deadline passes (or the caller's signal aborts):
   * hand it to every statement and fetch of the body. Its reason is a LeaseLostError. */
  readonly signal: AbortSignal;
  /** Why the lease was lost, once it was (null while held). */
  readonly lost: unknown;
  /** Successful renewals so far. */
  readonly renewals: number;
  /** Throws LeaseLostError once the lease is lost or its renew deadline has passed: call it
   * before a write that must not run late (and fence the write with `token` anyway). */
  check(): void;
}

const LEASE_FUNCTIONS = /advlock_(lease\w*|wait_lease|campaign|wait_campaign|leader|observe_leader|wait_leader|resign)\b/;

/** NotPreloadedError for 55000 (advlock not in shared_preload_libraries), LeasesUnavailableError
 * for 42883 on a lease or election function (the SQL edition, or an extension older than them:
 * leases came in 0.4.0, elections in 0.5.0), else null. */
export function unavailable(e: unknown): Error | null {
  const state = sqlstate(e);
  const text = String((e as { message?: unknown } | null)?.message ?? e);
  if (state === "55000" && text.includes("shared_preload_libraries")) {
    return new NotPreloadedError(
      "leases need the advlock library preloaded: add advlock to shared_preload_libraries in postgresql.conf " +
        `(shared_preload_libraries = 'advlock') and restart PostgreSQL (server: ${text})`,
      { cause: e },
    );
  }
  const missing = state === "42883" ? LEASE_FUNCTIONS.exec(text) : null;
  if (missing !== null) {
    return new LeasesUnavailableError(
      `this database has no ${missing[0]}(): leases (and elections) need the advlock extension (the SQL edition has none) ` +
        `in a version that has them (leases: 0.4.0, elections: 0.5.0), preloaded via shared_preload_libraries (server: ${text})`,
      { cause: e },
    );
  }
  return null;
}

/** Statements on a connection borrowed from the pool for each one. */
export class Runner {
  constructor(
    private readonly source: LeaseSource,
    private readonly pg: boolean,
    private readonly schema: string | undefined,
  ) {}

  /** One statement; `waitMs` bounds how long it may wait for a pooled connection (the borrowed
   * connection is given back unused if it comes later). */
  async query(sql: string, args: unknown[], signal?: AbortSignal, waitMs?: number, resultWins = false): Promise<Row[]> {
    if (!this.pg) {
      const s = this.source as PostgresJsLike;
      const prefix = await prefixFor(s, "pjs-pool", this.schema);
      if (waitMs === undefined) return pjsRun(s, qualify(sql, prefix), args, signal, resultWins);
      // A statement still queued for a connection at the deadline is cancelled (removed from the queue).
      const timeout = AbortSignal.timeout(Math.max(1, Math.ceil(waitMs)));
      return pjsRun(s, qualify(sql, prefix), args, signal ? AbortSignal.any([signal, timeout]) : timeout);
    }
    const pool = this.source as PgPoolLike;
    const connecting = pool.connect();
    let client: Awaited<typeof connecting>;
    if (waitMs === undefined) {
      client = await connecting;
    } else {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<null>((resolve) => {
        timer = setTimeout(() => resolve(null), Math.max(1, waitMs));
      });
      const got = await Promise.race([connecting, late]).finally(() => clearTimeout(timer));
      if (got === null) {
        connecting.then((c) => c.release(), () => undefined);
        throw new Error(`no pooled connection within ${waitMs} ms`);
      }
      client = got;
    }
    let broken: Error | undefined;
    try {
      const prefix = await prefixFor(client, "pg-client", this.schema);
      return await pgRun(client, qualify(sql, prefix), args, signal, resultWins);
    } catch (e) {
      // A connection the server ended (or a standby's) goes, so the next statement gets a new one.
      if (isConnectionError(e) || signal?.aborted) broken = e as Error;
      throw e;
    } finally {
      client.release(broken);
    }
  }
}

class LeaseState implements Lease {
  token = 0n;
  lost: unknown = null;
  renewals = 0;
  readonly key: bigint;
  readonly #controller = new AbortController();
  readonly signal: AbortSignal;
  deadline = 0; // performance.now() at which the body must stop without a renewal
  stoppedAtDeadline = false;
  closing = false;
  lastError: unknown = null;

  constructor(
    /** "lease", or "term of leadership" (messages say which). */
    readonly what: string,
    readonly ns: string,
    readonly id: string,
    readonly ttlMs: number,
    readonly renewDeadlineMs: number,
    outer: AbortSignal | undefined,
  ) {
    this.key = keyOf(ns, id);
    this.signal = outer ? AbortSignal.any([outer, this.#controller.signal]) : this.#controller.signal;
  }

  label(): string {
    return `advlock_key('${this.ns}', '${this.id}')`;
  }

  lostError(): LeaseLostError {
    const why = (this.lost as { message?: unknown } | null)?.message ?? this.lost;
    return new LeaseLostError(`the ${this.what} on ${this.label()} (token ${this.token}) was lost: ${String(why)}`, { cause: this.lost });
  }

  markLost(reason: unknown): void {
    if (this.lost !== null) return;
    this.lost = reason;
    if (!this.closing) this.#controller.abort(this.lostError());
  }

  pastDeadline(): boolean {
    if (performance.now() < this.deadline) return false;
    const why = `no renewal succeeded before the renew deadline (${this.renewDeadlineMs} ms of the ttl of ${this.ttlMs} ms)`;
    const last = this.lastError as { message?: unknown } | null;
    this.stoppedAtDeadline = true;
    this.markLost(new Error(last ? `${why}; last error: ${String(last.message ?? last)}` : why));
    return true;
  }

  check(): void {
    if (this.lost === null && this.token !== 0n && !this.closing) this.pastDeadline();
    if (this.lost !== null) throw this.lostError();
  }
}

/** The performance.now() of a lease's grant, from the server's clock: its expires_at minus the
 * TTL, located by the time this statement was sent (the server read its clock after that, so the
 * grant is placed no later than it was, and the renew deadline comes no later than it should).
 * An Error when the lease has already ended or the server could not say. */
async function serverGrantTime(runner: Runner, token: bigint, ttlMs: number): Promise<number | Error> {
  const sentAt = performance.now();
  try {
    const [row] = await runner.query(UNTIL_EXPIRY, [token.toString()]);
    if (row === undefined) return new Error("the lease had already ended when its wait returned");
    return sentAt + Number(row[0]) - ttlMs;
  } catch (e) {
    return new Error(`could not read the lease's expires_at after its wait: ${String((e as { message?: unknown }).message ?? e)}`, { cause: e });
  }
}

const sleep = (ms: number, signal: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });


/** What a lease-shaped hold runs: a lease's statements, or an election term's. */
interface Shape {
  what: string;
  acquire: string;
  acquireArgs: unknown[];
  wait: string;
  waitArgs: unknown[];
  release: string;
  releaseName: string;
  slots: number;
}

/** The options every lease-shaped hold takes, checked; `usage` is the call shown in messages. */
function holdOptions(o: Record<string, unknown>, usage: string) {
  if (o["ttlMs"] === undefined) throw new TypeError(`ttlMs is required: ${usage}`);
  if (o["timeoutMs"] === undefined) throw new TypeError(`timeoutMs is required: ${usage}`);
  const ttlMs = ms(o["ttlMs"], "ttlMs");
  if (ttlMs === 0) throw new RangeError(`ttlMs must be a positive number of milliseconds, got ${String(o["ttlMs"])}`);
  const timeoutMs = ms(o["timeoutMs"], "timeoutMs");
  let renewDeadlineMs = Math.floor((ttlMs * 2) / 3);
  if (o["renewDeadlineMs"] !== undefined) {
    renewDeadlineMs = ms(o["renewDeadlineMs"], "renewDeadlineMs");
    if (!(renewDeadlineMs > 0 && renewDeadlineMs < ttlMs)) {
      throw new RangeError(
        `renewDeadlineMs must be more than 0 and less than ttlMs (${ttlMs}): the body must stop before the server ends the lease, got ${renewDeadlineMs}`,
      );
    }
  }
  return { ttlMs, timeoutMs, renewDeadlineMs, schema: checkSchema(o["schema"]), signal: checkSignal(o["signal"]) };
}

/** The Runner for a lease's pool, or TypeError naming what to pass. */
export function leaseRunner(pool: unknown, schema: string | undefined): Runner {
  const kind = kindOf(pool, "pool");
  if (kind !== "pg-pool" && kind !== "pjs-pool") {
    throw new TypeError(
      "pool: pass the pool (a node-postgres Pool, or the postgres.js sql itself), not a connection or a transaction: the " +
        "background renewals borrow their own pooled connection",
    );
  }
  return new Runner(pool as LeaseSource, kind === "pg-pool", schema);
}

/** Acquire (waiting at most timeoutMs), renew in the background, run `fn`, release: the one
 * routine of lease() and leader(). */
async function hold<S extends LeaseState, T>(
  runner: Runner,
  state: S,
  shape: Shape,
  timeoutMs: number,
  signal: AbortSignal | undefined,
  fn: (held: S) => Promise<T> | T,
): Promise<T> {
  const { ttlMs, renewDeadlineMs } = state;
  // ---- acquire ----
  // The renew deadline counts from the grant. Granted at once, the grant came after the
  // statement was sent: counting from the send is the safe side. Granted after a wait (of up to
  // timeoutMs, maybe longer than the TTL), the server says when: its expires_at.
  let grantedAt: number | Error = performance.now();
  let token: bigint | null;
  try {
    const granted = (rows: Row[]): bigint | null => (rows[0]?.[0] === null || rows[0]?.[0] === undefined ? null : toBigInt(rows[0][0]));
    // A lease granted as the caller's signal aborts is released, not left to its TTL.
    token = granted(await runner.query(shape.acquire, shape.acquireArgs, signal, undefined, true));
    if (token === null && timeoutMs > 0 && !signal?.aborted) {
      token = granted(await runner.query(shape.wait, shape.waitArgs, signal, undefined, true));
      if (token !== null && !signal?.aborted) grantedAt = await serverGrantTime(runner, token, ttlMs);
    }
    if (signal?.aborted) {
      if (token !== null) await runner.query(shape.release, [token.toString()]);
      throw signal.reason;
    }
    if (token === null) {
      const rows = await runner.query(WHO, [state.key.toString()]);
      const holders: Holder[] = rows.map((r) => ({ pid: Number(r[0]), applicationName: (r[1] as string | null) ?? null, state: null }));
      const heldBy = holders.map((h) => `PID ${h.pid} (application_name ${JSON.stringify(h.applicationName)})`).join("; ");
      throw new LeaseTimeoutError(
        `could not obtain a ${shape.what} on key ${state.key} = ${state.label()} within ${timeoutMs} ms` +
          (shape.slots > 1 ? ` (${shape.slots} slots)` : "") +
          (heldBy ? `: held by ${heldBy}` : ""),
        holders,
      );
    }
  } catch (e) {
    throw unavailable(e) ?? e;
  }
  state.token = token;
  if (grantedAt instanceof Error) {
    state.deadline = -Infinity;
    state.markLost(grantedAt);
  } else {
    state.deadline = grantedAt + renewDeadlineMs;
  }

  // ---- renew in the background ----
  const stop = new AbortController();
  const interval = renewDeadlineMs / 3; // two retries after a failure before the deadline passes
  const renewer = (async () => {
    while (!stop.signal.aborted) {
      const remaining = Math.max(0, state.deadline - performance.now());
      const delay = state.lastError === null ? Math.min(interval, remaining) : Math.min(remaining, Math.max(10, Math.min(interval, remaining / 4)));
      await sleep(delay, stop.signal);
      if (stop.signal.aborted || state.pastDeadline()) return;
      const renewSent = performance.now();
      let ok: unknown;
      try {
        const rows = await runner.query(RENEW, [state.token.toString(), ttlMs], undefined, state.deadline - renewSent);
        ok = rows[0]?.[0];
      } catch (e) {
        // Not renewed yet, not lost: a server restarting or failing over (connection refused or
        // reset, 57P01, 57P03, 25006 until the new primary is writable) keeps the lease on its
        // side, and so does a pool with no free connection. The next try takes a fresh
        // connection (Runner.query drops a broken one) with the same id, until the renew
        // deadline; only a renewal that returns false says the lease is gone.
        state.lastError = e;
        continue;
      }
      if (ok !== true) {
        state.markLost(new Error("advlock_lease_renew returned false: the lease expired or was released by someone else"));
        return;
      }
      state.renewals += 1;
      state.deadline = renewSent + renewDeadlineMs;
      state.lastError = null;
    }
  })();

  // ---- the body, then release ----
  let result: T | undefined;
  let failure: { error: unknown } | null = null;
  try {
    result = await fn(state);
  } catch (e) {
    failure = { error: e };
  }
  state.closing = true;
  stop.abort();
  await renewer;
  if (!state.stoppedAtDeadline) {
    let released: unknown;
    try {
      released = (await runner.query(shape.release, [state.token.toString()]))[0]?.[0];
    } catch (e) {
      if (failure === null) throw e;
      throw failure.error;
    }
    if (released !== true && state.lost === null) state.lost = new Error(`${shape.releaseName} found the ${shape.what} already ended`);
  }
  if (state.lost !== null) throw state.lostError();
  if (failure !== null) throw failure.error;
  return result as T;
}

/** Run `fn` holding a lease on (ns, id) taken from `pool` (a node-postgres Pool or a postgres.js
 * sql): taken with a server-side bounded wait of at most `timeoutMs` that holds no snapshot (CALL
 * advlock_wait_lease; LeaseTimeoutError after, naming the holders), renewed in the background on
 * any connection of the pool, released when `fn` settles. The renew deadline counts from the
 * grant (after a wait, by the server's clock). If a renewal says the lease is gone or none
 * succeeds before the renew deadline, `lease.signal` is aborted (the body must stop: pass the
 * signal on) and lease() throws LeaseLostError once `fn` has settled; a lease stopped at its
 * renew deadline is left to run out at its TTL rather than released, so whatever the body still
 * had in flight ends before another holder is granted the key. Needs advlock in
 * shared_preload_libraries (NotPreloadedError otherwise). */
export async function lease<T>(
  pool: LeaseSource,
  ns: string,
  id: Id,
  options: LeaseOptions,
  fn: (lease: Lease) => Promise<T> | T,
): Promise<T> {
  checkNs(ns);
  const idt = idText(id); // first: options passed in the id's place say so
  const o = checkOptions(options, OPTIONS, "lease");
  const { ttlMs, timeoutMs, renewDeadlineMs, schema, signal } = holdOptions(o, "lease(pool, ns, id, { ttlMs: 30000, timeoutMs: 5000 }, fn)");
  const slots = o["slots"] ?? 1;
  if (typeof slots !== "number" || !Number.isInteger(slots)) throw new TypeError(`slots must be an integer, got ${describe(slots)}`);
  if (slots < 1 || slots > INT4_MAX) throw new RangeError(`slots must be at least 1 (1: a lock; N: up to N holders at once), got ${slots}`);
  checkFn(fn, "the lease");
  const runner = leaseRunner(pool, schema);
  signal?.throwIfAborted();
  const state = new LeaseState("lease", ns, idt, ttlMs, renewDeadlineMs, signal);
  const shape: Shape = {
    what: "lease",
    acquire: ACQUIRE,
    acquireArgs: [ns, idt, ttlMs, 0, slots],
    wait: WAIT,
    waitArgs: [state.key.toString(), ttlMs, timeoutMs, slots],
    release: RELEASE,
    releaseName: "advlock_lease_release",
    slots,
  };
  return hold(runner, state, shape, timeoutMs, signal, fn);
}

// ---- leader election: a term is a one-slot lease that carries its candidate ---------------

const CAMPAIGN =
  "SELECT CAST(@.advlock_campaign(CAST($1 AS text), CAST($2 AS text), CAST($3 AS int4), CAST($4 AS int4), CAST($5 AS text)) AS text)";
// Campaigning when the key is taken: commits first and waits holding no snapshot.
const WAIT_CAMPAIGN = "CALL @.advlock_wait_campaign(CAST($1 AS int8), CAST($2 AS int4), CAST($3 AS int4), CAST($4 AS text))";
const RESIGN = "SELECT @.advlock_resign(CAST($1 AS int8))";
const CANDIDATE_BYTES = 128;

export interface LeaderOptions {
  /** Who campaigns, as observers see it (a host or pod name and pid): 1 to 128 bytes, no control characters. */
  candidate: string;
  /** How long a term lasts on the server without a renewal, in milliseconds. */
  ttlMs: number;
  /** The longest wait to be elected, in milliseconds (0: just try). */
  timeoutMs: number;
  /** The body is stopped this long after the last successful renewal was sent; default two thirds of ttlMs. */
  renewDeadlineMs?: number;
  /** The schema advlock is installed in (default: found once per connection). */
  schema?: string;
  /** Aborting it cancels the campaign, or aborts the body's signal. */
  signal?: AbortSignal;
}

const LEADER_OPTIONS = ["candidate", "ttlMs", "timeoutMs", "renewDeadlineMs", "schema", "signal"] as const;

/** What the body of leader() gets: a term of leadership, held like a lease. */
export interface Leadership extends Lease {
  /** The term: a fencing token larger than every earlier term of the key (the same as `token`). */
  readonly term: bigint;
  readonly candidate: string;
}

class LeadershipState extends LeaseState implements Leadership {
  constructor(
    readonly candidate: string,
    ns: string,
    id: string,
    ttlMs: number,
    renewDeadlineMs: number,
    outer: AbortSignal | undefined,
  ) {
    super("term of leadership", ns, id, ttlMs, renewDeadlineMs, outer);
  }

  get term(): bigint {
    return this.token;
  }
}

function checkCandidate(candidate: unknown): string {
  if (typeof candidate !== "string") throw new TypeError(`candidate must be a string (e.g. the host or pod name), got ${describe(candidate)}`);
  const bytes = Buffer.byteLength(candidate, "utf8");
  // eslint-disable-next-line no-control-regex
  if (bytes < 1 || bytes > CANDIDATE_BYTES || /[\u0000-\u001f\u007f]/.test(candidate)) {
    throw new RangeError(
      `candidate must be 1 to ${CANDIDATE_BYTES} bytes without control characters (observers see it as the leader's name), got ${JSON.stringify(candidate)}`,
    );
  }
  return candidate;
}

/** Campaign for the leadership of (ns, id) as `candidate` on `pool` (a node-postgres Pool or a
 * postgres.js sql): wait at most `timeoutMs` (CALL advlock_wait_campaign, holding no snapshot;
 * LeaseTimeoutError after, naming the leader), then run `fn` for the term, renewed in the
 * background like a lease (the renew deadline counts from the election, by the server's clock,
 * however long the campaign waited). `fn` runs once, when elected; when it settles the term is
 * resigned (advlock_resign), handing the key to the next candidate at once. If the term is lost,
 * `term.signal` aborts and leader() throws LeaseLostError once `fn` has settled (stopped at its
 * renew deadline, the term runs out at its TTL instead of being resigned). Needs advlock in
 * shared_preload_libraries. */
export async function leader<T>(
  pool: LeaseSource,
  ns: string,
  id: Id,
  options: LeaderOptions,
  fn: (term: Leadership) => Promise<T> | T,
): Promise<T> {
  checkNs(ns);
  const idt = idText(id); // first: options passed in the id's place say so
  const o = checkOptions(options, LEADER_OPTIONS, "leader");
  const usage = 'leader(pool, ns, id, { candidate: "pod-1", ttlMs: 15000, timeoutMs: 600000 }, fn)';
  if (o["candidate"] === undefined) throw new TypeError(`candidate is required: ${usage}`);
  const candidate = checkCandidate(o["candidate"]);
  const { ttlMs, timeoutMs, renewDeadlineMs, schema, signal } = holdOptions(o, usage);
  checkFn(fn, "the term of leadership");
  const runner = leaseRunner(pool, schema);
  signal?.throwIfAborted();
  const state = new LeadershipState(candidate, ns, idt, ttlMs, renewDeadlineMs, signal);
  const shape: Shape = {
    what: "term of leadership",
    acquire: CAMPAIGN,
    acquireArgs: [ns, idt, ttlMs, 0, candidate],
    wait: WAIT_CAMPAIGN,
    waitArgs: [state.key.toString(), ttlMs, timeoutMs, candidate],
    release: RESIGN,
    releaseName: "advlock_resign",
    slots: 1,
  };
  return hold(runner, state, shape, timeoutMs, signal, fn);
}
