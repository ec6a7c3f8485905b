// Transaction-scope locks and diagnostics on a connection the caller already has.
import { checkFn, checkOptions, checkSchema, checkSignal, modeOf, ms, textArray, toBigInt, toBool } from "./args.js";
import {
  type Kind,
  type PgClientLike,
  type PgPoolLike,
  type PostgresJsLike,
  type Row,
  kindOf,
  pgRun,
  prefixFor,
  qualify,
  run,
  xactProblem,
} from "./driver.js";
import { NotInTransactionError, asLockTimeout, sqlstate } from "./errors.js";
import { type Id, checkNs, idText, key } from "./key.js";

/** What withLock() and friends accept: a node-postgres Client, PoolClient or Pool, or a
 * postgres.js sql (or the tx of `sql.begin`). */
export type Db = PgClientLike | PgPoolLike | PostgresJsLike;

// The connection the callback gets: a Pool's checked-out PoolClient, a postgres.js sql's tx,
// or the client / tx passed in.
type PoolClientOf<P> = P extends { connect(): Promise<infer C>; connect(callback: never): void }
  ? C
  : P extends { connect(): Promise<infer C> }
    ? C
    : never;
type TxOf<S> = S extends { savepoint: unknown }
  ? S
  : S extends { begin(options: string, cb: (sql: infer T) => unknown): unknown }
    ? T
    : S extends { begin(cb: (sql: infer T) => unknown): unknown }
      ? T
      : S;
/** The connection withLock's callback runs on, for what was passed in. */
export type ConnOf<D> = D extends PgPoolLike ? PoolClientOf<D> : D extends PostgresJsLike ? TxOf<D> : D;

export interface LockOptions {
  /** The longest wait in the server's lock queue, in milliseconds (required: an unbounded wait is
   * the trap advlock removes). 0: no wait. */
  timeoutMs: number;
  /** A shared lock (many holders) instead of an exclusive one. */
  shared?: boolean;
  /** The schema advlock is installed in (default: found once per connection). */
  schema?: string;
  /** Aborting it while the lock is waited for cancels the wait on the server. */
  signal?: AbortSignal;
}

export type TryLockOptions = Partial<LockOptions>;

const LOCK_OPTIONS = ["timeoutMs", "shared", "schema", "signal"] as const;

const LOCK_SQL =
  "SELECT @.advlock_lock_with_timeout(CAST($1 AS text), CAST($2 AS text), CAST($3 AS int4), mode => CAST($4 AS text))";
const LOCK_ALL_SQL =
  "SELECT @.advlock_lock_all_with_timeout(CAST($1 AS text), CAST($2 AS text[]), CAST($3 AS int4), mode => CAST($4 AS text))";
const TRY_SQL =
  "SELECT @.advlock_try_with_timeout(CAST($1 AS text), CAST($2 AS text), CAST($3 AS int4), mode => CAST($4 AS text))";

interface Parsed {
  timeoutMs: number;
  mode: "shared" | "exclusive";
  schema: string | undefined;
  signal: AbortSignal | undefined;
}

function parse(options: unknown, what: string, timeoutRequired: boolean): Parsed {
  const o = checkOptions(options ?? {}, LOCK_OPTIONS, what);
  if (timeoutRequired && o["timeoutMs"] === undefined) {
    throw new TypeError(`timeoutMs is required: ${what}(..., { timeoutMs: 2000 }, fn) waits at most that long`);
  }
  return {
    timeoutMs: o["timeoutMs"] === undefined ? 0 : ms(o["timeoutMs"], "timeoutMs"),
    mode: modeOf(o["shared"]),
    schema: checkSchema(o["schema"]),
    signal: checkSignal(o["signal"]),
  };
}

/** Take the lock with `sql` on a connection in a transaction; 55P03 becomes LockTimeoutError. */
async function lockOn(conn: unknown, kind: Kind, sql: string, args: unknown[], p: Parsed, cacheOn: object): Promise<Row[]> {
  const c = conn as PgClientLike | PostgresJsLike;
  try {
    const prefix = await prefixFor(c, kind, p.schema, cacheOn);
    return await run(c, kind, qualify(sql, prefix), args, p.signal);
  } catch (e) {
    // node-postgres rejects a failed statement before the server's ReadyForQuery says the
    // transaction is aborted, so a call right after it may still see "in a transaction": the
    // server refuses the statement (25P02), and nothing was taken.
    if (sqlstate(e) === "25P02") {
      throw new NotInTransactionError("the transaction is aborted (a previous statement failed): roll it back first", { cause: e });
    }
    throw asLockTimeout(e) ?? e;
  }
}

/** Run `fn` holding a transaction-scope lock: inside a transaction, always. With a client
 * already in a transaction (or a postgres.js tx) the lock joins it and lasts until its COMMIT
 * or ROLLBACK; otherwise withLock opens the transaction (a Pool: on a client it checks out),
 * commits it after `fn` resolves and rolls it back if `fn` throws. */
async function inTransaction<D, T>(
  db: D,
  what: string,
  sql: string,
  args: unknown[],
  p: Parsed,
  fn: (conn: ConnOf<D>) => Promise<T> | T,
): Promise<T> {
  const kind = kindOf(db);
  p.signal?.throwIfAborted();
  switch (kind) {
    case "pjs-pool": {
      const sqlPool = db as unknown as { begin(cb: (tx: unknown) => Promise<T>): Promise<T> };
      return sqlPool.begin(async (tx) => {
        await lockOn(tx, "pjs-tx", sql, args, p, db as object);
        return fn(tx as ConnOf<D>);
      });
    }
    case "pjs-tx":
      await lockOn(db, kind, sql, args, p, db as object);
      return fn(db as ConnOf<D>);
    case "pjs-reserved":
      throw new NotInTransactionError(`advlock.${what}(): ${xactProblem(db, kind)}`);
    case "pg-pool": {
      const client = await (db as PgPoolLike).connect();
      let broken: Error | undefined;
      try {
        return await ownTransaction(client, sql, args, p, () => fn(client as ConnOf<D>));
      } catch (e) {
        broken = connectionBroken(e);
        throw e;
      } finally {
        client.release(broken);
      }
    }
    case "pg-client": {
      const status = (db as { _txStatus?: unknown })._txStatus;
      if (status === "I") return ownTransaction(db as PgClientLike, sql, args, p, () => fn(db as ConnOf<D>));
      const problem = xactProblem(db, kind);
      if (problem !== null) throw new NotInTransactionError(`advlock.${what}(): ${problem}`);
      await lockOn(db, kind, sql, args, p, db as object);
      return fn(db as ConnOf<D>);
    }
  }
}

function connectionBroken(e: unknown): Error | undefined {
  // A client whose connection failed must not go back to the pool.
  const code = (e as { code?: unknown } | null)?.code;
  if (typeof code === "string" && (code.startsWith("08") || code === "57P01")) return e as Error;
  return undefined;
}

/** BEGIN, COMMIT, ROLLBACK: sent as node-postgres sends a plain string (a query config object
 * costs measurably more per statement, which bench case 12 showed). */
async function control(client: PgClientLike, command: "BEGIN" | "COMMIT" | "ROLLBACK"): Promise<void> {
  await (client as unknown as { query(text: string): Promise<unknown> }).query(command);
}

async function ownTransaction<T>(
  client: PgClientLike,
  sql: string,
  args: unknown[],
  p: Parsed,
  body: () => Promise<T> | T,
): Promise<T> {
  await control(client, "BEGIN");
  let result: T;
  try {
    await lockOn(client, "pg-client", sql, args, p, client);
    result = await body();
  } catch (e) {
    try {
      await control(client, "ROLLBACK");
    } catch {
      // the connection is gone: the server ended the transaction, and the lock with it
    }
    throw e;
  }
  await control(client, "COMMIT");
  return result;
}

/** Lock (ns, id) for a transaction and run `fn` in it, waiting at most `timeoutMs` in the
 * server's lock queue (advlock_lock_with_timeout): LockTimeoutError names the holder. On a client
 * in a transaction (or a postgres.js tx) the lock lasts until that transaction ends; on a client
 * outside one, a Pool or a postgres.js sql, withLock opens the transaction around `fn` and
 * commits it (rolls it back if `fn` throws): the lock is released then. */
export function withLock<D extends Db, T>(
  db: D,
  ns: string,
  id: Id,
  options: LockOptions,
  fn: (conn: ConnOf<D>) => Promise<T> | T,
): Promise<T> {
  try {
    const [n, i] = [checkNs(ns), idText(id)]; // first: options passed in the id's place say so
    const p = parse(options, "withLock", true);
    const args = [n, i, p.timeoutMs, p.mode];
    checkFn(fn, "the lock");
    return inTransaction(db, "withLock", LOCK_SQL, args, p, fn);
  } catch (e) {
    return Promise.reject(e);
  }
}

/** Lock every (ns, id) or none, within one overall deadline (advlock_lock_all_with_timeout:
 * ascending key order, so callers never deadlock each other), then run `fn` as withLock does. */
export function withLockAll<D extends Db, T>(
  db: D,
  ns: string,
  ids: Iterable<Id>,
  options: LockOptions,
  fn: (conn: ConnOf<D>) => Promise<T> | T,
): Promise<T> {
  try {
    const p = parse(options, "withLockAll", true);
    checkNs(ns);
    if (typeof ids === "string" || ids === null || typeof ids !== "object" || !(Symbol.iterator in ids)) {
      throw new TypeError("ids must be an array (or iterable) of ids, not a single id");
    }
    const texts = [...ids].map((i) => idText(i, "ids element"));
    if (texts.length === 0) throw new RangeError("ids must not be empty");
    checkFn(fn, "the locks");
    return inTransaction(db, "withLockAll", LOCK_ALL_SQL, [ns, textArray(texts), p.timeoutMs, p.mode], p, fn);
  } catch (e) {
    return Promise.reject(e);
  }
}

/** Take (ns, id) for the rest of the current transaction if it is free (or frees up within
 * `timeoutMs`, default 0: no wait): true when held, false when not. Refused
 * (NotInTransactionError) outside a transaction block: pass a client after BEGIN, or the tx of
 * postgres.js `sql.begin`. */
export async function tryLock(db: PgClientLike | PostgresJsLike, ns: string, id: Id = "", options: TryLockOptions = {}): Promise<boolean> {
  const [n, i] = [checkNs(ns), idText(id)]; // first: options passed in the id's place say so
  const p = parse(options, "tryLock", false);
  const args = [n, i, p.timeoutMs, p.mode];
  const kind = kindOf(db);
  const problem = xactProblem(db, kind);
  if (problem !== null) throw new NotInTransactionError(`advlock.tryLock() takes a transaction-scope lock, but ${problem}`);
  const [row] = await lockOn(db, kind, TRY_SQL, args, p, db as object);
  return toBool(row?.[0]);
}

/** One row of advlock_holders: a holder (granted) or a waiter of an advisory lock. */
export interface LockEntry {
  key: bigint | null;
  mode: string;
  granted: boolean;
  pid: number;
  applicationName: string | null;
  backendState: string | null;
  /** How long the holder has been idle, as PostgreSQL's interval text. */
  idleFor: string | null;
  isIdleHolder: boolean | null;
  waitingSince: Date | null;
  blockedBy: number[] | null;
  /** ns:id, preloaded mode only. */
  label: string | null;
  /** preloaded mode only */
  scope: string | null;
  /** preloaded mode only */
  heldSince: Date | null;
}

const HOLDERS_SQL =
  "SELECT CAST(key AS text), mode, granted, pid, application_name, backend_state, CAST(idle_for AS text), is_idle_holder," +
  " waiting_since, blocked_by, label, scope, held_since FROM @.advlock_holders";

/** The rows of advlock_holders (holders first, then waiters, by key and pid); with ns, only
 * those of the lock key(ns, id). Any connection, pool or postgres.js sql. */
export async function holders(db: Db, ns?: string, id: Id = "", options: { schema?: string } = {}): Promise<LockEntry[]> {
  const o = checkOptions(options, ["schema"], "holders");
  const schema = checkSchema(o["schema"]);
  let sql = HOLDERS_SQL;
  const args: unknown[] = [];
  if (ns !== undefined) {
    sql += " WHERE key = CAST($1 AS int8)";
    args.push(key(ns, id).toString());
  }
  sql += " ORDER BY NOT granted, key, pid";
  const rows = await runAnywhere(db, sql, args, schema);
  return rows.map((r) => ({
    key: r[0] === null ? null : toBigInt(r[0]),
    mode: String(r[1]),
    granted: toBool(r[2]),
    pid: Number(r[3]),
    applicationName: (r[4] as string | null) ?? null,
    backendState: (r[5] as string | null) ?? null,
    idleFor: (r[6] as string | null) ?? null,
    isIdleHolder: r[7] === null ? null : toBool(r[7]),
    waitingSince: (r[8] as Date | null) ?? null,
    blockedBy: (r[9] as number[] | null) ?? null,
    label: (r[10] as string | null) ?? null,
    scope: (r[11] as string | null) ?? null,
    heldSince: (r[12] as Date | null) ?? null,
  }));
}

/** One statement on whatever `db` is (a pool lends a connection for it). */
export async function runAnywhere(db: Db, sql: string, args: unknown[], schema: string | undefined, signal?: AbortSignal): Promise<Row[]> {
  const kind = kindOf(db);
  if (kind === "pg-pool") {
    const client = await (db as PgPoolLike).connect();
    let broken: Error | undefined;
    try {
      const prefix = await prefixFor(client, "pg-client", schema);
      return await pgRun(client, qualify(sql, prefix), args, signal);
    } catch (e) {
      broken = connectionBroken(e);
      throw e;
    } finally {
      client.release(broken);
    }
  }
  const conn = db as PgClientLike | PostgresJsLike;
  const prefix = await prefixFor(conn, kind, schema);
  return run(conn, kind, qualify(sql, prefix), args, signal);
}
