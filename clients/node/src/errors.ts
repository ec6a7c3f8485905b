// advlock's errors, and the mapping from the server's 55P03 lock-timeout error.

/** Base class of every advlock error. */
export class AdvlockError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** A transaction-scope lock was asked for outside a transaction block: it would end with the
 * statement, protecting nothing. */
export class NotInTransactionError extends AdvlockError {}

/** One holder named by the server (a lock timeout's DETAIL, or advlock_holders/advlock_leases). */
export interface Holder {
  readonly pid: number;
  readonly applicationName: string | null;
  readonly state: string | null;
}

/** The lock stayed busy for the whole bounded wait (SQLSTATE 55P03, or a session lock or lease
 * whose wait ran out). `holders` lists who held it when the wait ended; empty when the holder let
 * go just after the wait ended. */
export class LockTimeoutError extends AdvlockError {
  readonly holders: readonly Holder[];
  readonly detail: string | null;
  constructor(message: string, holders: readonly Holder[], detail: string | null = null, options?: { cause?: unknown }) {
    super(detail ? `${message}\nDETAIL: ${detail}` : message, options);
    this.holders = holders;
    this.detail = detail;
  }
  /** The (first) holder's backend pid, if the server named one. */
  get pid(): number | null {
    return this.holders[0]?.pid ?? null;
  }
  /** The (first) holder's application_name, if the server named one. */
  get applicationName(): string | null {
    return this.holders[0]?.applicationName ?? null;
  }
}

/** A session lock's connection was lost (or the lock was gone at unlock time): whatever the code
 * did after that was not protected. Raised by release(), never swallowed. */
export class LockLostError extends AdvlockError {}

/** advlock_lease waited its whole bounded wait without getting the key. */
export class LeaseTimeoutError extends LockTimeoutError {}

/** A lease ended while its body ran: a renewal returned false (it expired, or someone released
 * it), no renewal succeeded before the renew deadline, or the release found it already gone. */
export class LeaseLostError extends LockLostError {}

/** advlock_fence refused this writer's token (SQLSTATE LK001): a larger token has already
 * passed the fence, so a newer holder has taken over. The transaction is aborted: roll it back
 * and stop writing. `token` is the refused token, `passed` the one that had passed. */
export class FenceRefusedError extends AdvlockError {
  readonly token: bigint;
  readonly passed: bigint | null;
  readonly detail: string | null;
  constructor(message: string, token: bigint, passed: bigint | null, detail: string | null = null, options?: { cause?: unknown }) {
    super(detail ? `${message}\nDETAIL: ${detail}` : message, options);
    this.token = token;
    this.passed = passed;
    this.detail = detail;
  }
}

/** advlock_lease_check found the lease (or term) no longer held (SQLSTATE LK002) inside the
 * writer's transaction: it expired or was released. The transaction is aborted: roll it back. */
export class LeaseNotHeldError extends LeaseLostError {}

/** This database has no leases: the SQL edition (or an extension version before them). */
export class LeasesUnavailableError extends AdvlockError {}

/** advlock is not in shared_preload_libraries, so every lease function raises 55000. */
export class NotPreloadedError extends LeasesUnavailableError {}

/** Neither the advlock extension nor the SQL edition is installed in the database (and no
 * `schema` option named where it is). */
export class NotInstalledError extends AdvlockError {}

/** sessionLock() found that its connection is not one server session for its whole life: a
 * pooler in transaction or statement mode hands the server session to other clients between
 * transactions, so a session lock taken through it would be shared with them. */
export class UnsafePoolerError extends AdvlockError {}

// The DETAIL is built with format('PID %s (application_name %s, state %s)', pid,
// quote_literal(app), quote_literal(state)): quote_literal gives '' for a quote, an E'' string
// when a backslash is present, and NULL (printed as nothing) for NULL.
const LITERAL = String.raw`(E?'(?:[^']|'')*'|)`;
const HOLDER = new RegExp(String.raw`PID (\d+) \(application_name ${LITERAL}, state ${LITERAL}\)`, "g");

function unquote(literal: string | undefined): string | null {
  if (!literal) return null;
  const e = literal.startsWith("E");
  const body = (e ? literal.slice(2, -1) : literal.slice(1, -1)).replaceAll("''", "'");
  return e ? body.replaceAll("\\\\", "\\") : body;
}

export function parseHolders(detail: string | null | undefined): Holder[] {
  if (!detail) return [];
  return [...detail.matchAll(HOLDER)].map((m) => ({
    pid: Number(m[1]),
    applicationName: unquote(m[2]),
    state: unquote(m[3]),
  }));
}

/** The SQLSTATE of a driver error (node-postgres and postgres.js both use `code`). */
export function sqlstate(e: unknown): string | undefined {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

// Errors of the server being away rather than of what a statement said: a connection refused,
// reset or closed (Node's socket codes, postgres.js's CONNECTION_* codes, node-postgres's
// "Connection terminated"), the server going down or coming up (class 08, 57P01 admin shutdown,
// 57P02 crash shutdown, 57P03 cannot connect now), or a standby not yet promoted (25006
// read-only) -- what a restart or a failover looks like from a client.
const AWAY_STATES = /^(08...|57P0[123]|25006)$/;
const AWAY_CODES = /^(ECONNREFUSED|ECONNRESET|EPIPE|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|CONNECTION_(CLOSED|ENDED|DESTROYED)|CONNECT_TIMEOUT)$/;

/** True when `e` says the server could not be reached or its connection ended (see above): the
 * connection is not to be used again, and a statement that failed so may succeed on a new one. */
export function isConnectionError(e: unknown): boolean {
  const err = e as { code?: unknown; message?: unknown } | null;
  const code = typeof err?.code === "string" ? err.code : "";
  if (AWAY_STATES.test(code) || AWAY_CODES.test(code)) return true;
  return /^Connection terminated|not queryable/.test(String(err?.message ?? ""));
}

/** The LockTimeoutError for a driver error with SQLSTATE 55P03, else null. */
export function asLockTimeout(e: unknown): LockTimeoutError | null {
  if (sqlstate(e) !== "55P03") return null;
  const err = e as { message?: unknown; detail?: unknown };
  const detail = typeof err.detail === "string" ? err.detail : null;
  return new LockTimeoutError(String(err.message ?? e), parseHolders(detail), detail, { cause: e });
}
