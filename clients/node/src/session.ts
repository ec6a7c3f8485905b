// Session locks done right: on a dedicated connection that the lock owns, to one server session.
//
// A session lock outlives transactions, so on a pooled connection it outlives your code too: the
// pool hands the connection, lock included, to the next borrower. sessionLock() therefore takes a
// connection string, never a connection, opens its own connection, and unlocks and closes it on
// release.
//
// A connection string can still lead to a pooler. In transaction or statement mode the server
// session behind the connection is handed to other clients between transactions: a session lock
// taken through it is shared with whoever gets that session next. So before locking, the
// connection proves it is one server session: the backend pid of the protocol (BackendKeyData)
// equals pg_backend_pid(), or, behind a pooler (which sends its own pid), a second connection
// opened at the same moment reaches a different backend, and the backend reached holds no
// advisory lock it was never asked for. Every later statement checks that it runs on the same
// backend with nobody else's transaction in between (the backend's local transaction counter).
//
// No probe is conclusive: a busy transaction-mode pool can hand the probe another backend (or none
// in time) and our next transaction to anyone. A lock taken between transactions there could be
// stranded on a server session we can no longer reach (and the pool would hand it to every later
// client). So behind a pooler the lock lives inside one open transaction block, from the try to
// the unlock: in every pooling mode an open transaction keeps its server session, so the lock is
// only ever taken on the pinned backend and released there (the block's first statement greets
// again and pins the backend it reached). Between statements (read committed)
// the block holds no snapshot.
//
// The wait goes through CALL advlock_wait_lock, which commits first and waits holding no
// snapshot, so a holder building an index concurrently is not stalled by the waiters. A CALL
// cannot commit inside a transaction block, so behind a pooler, and in the SQL edition (which has
// no such procedure), the wait runs inside the statement.
//
// The lock's connection sits idle while the body works elsewhere: advlock's
// idle_session_lock_timeout would terminate it, so the try opts it out (see TRY). Whatever ends
// the connection, the driver's own events on its socket say so at once (no query is sent to
// check), and the lock's signal is aborted with the reason.
import { checkOptions, checkSchema, checkSignal, modeOf, ms, toBigInt, toBool } from "./args.js";
import { type Row, SCHEMA_EXPR, pgRun, pjsRun, qualify, schemaPrefix } from "./driver.js";
import { type Holder, LockLostError, LockTimeoutError, UnsafePoolerError, sqlstate } from "./errors.js";
import { type Id, checkNs, describe, idText, keyOf } from "./key.js";

const BACKEND =
  "(SELECT pg_catalog.pg_backend_pid() AS pid," +
  " (SELECT CAST(pg_catalog.split_part(l.virtualtransaction, '/', 2) AS int8) FROM pg_catalog.pg_locks l" +
  " WHERE l.locktype = 'virtualxid' AND l.pid = pg_catalog.pg_backend_pid()) AS lxid) b";
// CALL advlock_wait_lock consumes two transactions (the CALL's, and the one it starts by
// committing first), and its arguments cannot hold a subquery: the pid alone guards it, and the
// next statement checks the counter.
const CALL_LXIDS = 2n;

const HELLO = (schemaExpr: string): string =>
  `WITH s AS (SELECT ${schemaExpr} AS nspname)` +
  " SELECT b.pid, CAST(b.lxid AS text), s.nspname, pg_catalog.current_database()," +
  " EXISTS (SELECT FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace" +
  " WHERE n.nspname = s.nspname AND p.proname = 'advlock_wait_lock' AND p.prokind = 'p')," +
  " EXISTS (SELECT FROM pg_catalog.pg_locks l WHERE l.locktype = 'advisory' AND l.pid = b.pid)" +
  ` FROM s, ${BACKEND}`;
const PID = "SELECT pg_catalog.pg_backend_pid()";
// The try also opts this connection out of advlock.idle_session_lock_timeout, which would
// otherwise terminate it while it holds the lock idle (what a session lock's connection does):
// only where the setting exists (current_setting(..., true) is NULL on the SQL edition and where
// advlock is not loaded: the try itself loads the library, before this column is evaluated), and
// not inside the pinning block (idle in a transaction is never terminated by it, and a session
// setting made there would stay on a server session the pooler hands on).
const TRY =
  "SELECT b.pid, CAST(b.lxid AS text), CASE WHEN b.pid = CAST($1 AS int4) AND b.lxid = CAST($2 AS int8) THEN" +
  " CAST(@.advlock_try_with_token(CAST($3 AS text), CAST($4 AS text), CAST($5 AS int4), mode => CAST($6 AS text)) AS text)" +
  " END, CASE WHEN b.pid = CAST($1 AS int4) AND NOT CAST($7 AS bool)" +
  " AND pg_catalog.current_setting('advlock.idle_session_lock_timeout', true) IS NOT NULL" +
  " THEN pg_catalog.set_config('advlock.idle_session_lock_timeout', '0', false) END" +
  ` FROM ${BACKEND}`;
const WAIT =
  "CALL @.advlock_wait_lock(CASE WHEN pg_catalog.pg_backend_pid() = CAST($1 AS int4)" +
  " THEN CAST($2 AS int8) END, CAST($3 AS int4), CAST($4 AS text))";
const HOLDING =
  "SELECT b.pid, CAST(b.lxid AS text), CASE WHEN b.pid = CAST($1 AS int4) AND b.lxid = CAST($2 AS int8) THEN" +
  ` @.advlock_holding(CAST($3 AS text), CAST($4 AS text), CAST($5 AS text)) END FROM ${BACKEND}`;
// The unlock runs on the pinned backend even when the counter moved: the lock is there.
const UNLOCK =
  "SELECT b.pid, CAST(b.lxid AS text), CASE WHEN b.pid = CAST($1 AS int4) THEN" +
  ` @.advlock_unlock(CAST($2 AS text), CAST($3 AS text), CAST($4 AS text)) END FROM ${BACKEND}`;
// Behind a pooler: the block that pins the server session for the life of the lock.
const PIN = "BEGIN";
const UNPIN = "COMMIT";
const WHO =
  "SELECT pid, application_name, backend_state FROM @.advlock_holders WHERE key = CAST($1 AS int8) AND granted ORDER BY pid";
// How long a second connection may take to answer pg_backend_pid() when looking for a pooler: a
// session-mode pool with no free server connection makes it wait (inconclusive, not refused).
const PROBE_WAIT_MS = 2000;

const INSTEAD =
  "use a connection string that reaches PostgreSQL itself (not the pooler), a pooler in session mode, lease() " +
  "(which any pool can carry), or withLock() in a transaction";

export type Driver = "pg" | "postgres";

export interface SessionLockOptions {
  /** The longest wait for the lock, in milliseconds (required). */
  timeoutMs: number;
  shared?: boolean;
  /** application_name of the lock's own connection (shown to whoever waits for it). */
  applicationName?: string;
  /** The schema advlock is installed in (default: found on the connection). */
  schema?: string;
  /** Which driver opens the connection: "pg" (node-postgres, the default when installed) or "postgres" (postgres.js). */
  driver?: Driver;
  /** Aborting it while the lock is waited for cancels the wait and closes the connection. */
  signal?: AbortSignal;
}

const OPTIONS = ["timeoutMs", "shared", "applicationName", "schema", "driver", "signal"] as const;

/** One connection of either driver: statements with rows as arrays, and how to close it. */
interface Conn {
  protocolPid: number | null;
  rows(sql: string, args: unknown[], signal?: AbortSignal): Promise<Row[]>;
  close(): Promise<void>;
  dead(): boolean;
  /** Call `listener` once, with the first cause, when the connection dies (not when close()
   * closes it): told by the driver's own events on its socket, no query involved. */
  onDeath(listener: (cause: unknown) => void): void;
}

/** The death watch of a connection: the first cause is kept; listeners hear of it once. */
class Death {
  cause: unknown = undefined;
  dead = false;
  closing = false;
  readonly #listeners: ((cause: unknown) => void)[] = [];

  die(cause: unknown): void {
    if (this.dead) return;
    this.dead = true;
    this.cause = cause;
    if (this.closing) return;
    for (const listener of this.#listeners.splice(0)) listener(cause);
  }

  on(listener: (cause: unknown) => void): void {
    if (this.dead) {
      if (!this.closing) queueMicrotask(() => listener(this.cause));
      return;
    }
    this.#listeners.push(listener);
  }

  /** A statement's failure that is the connection's loss is its cause of death (a failure
   * reported to a running statement is not emitted as an event). */
  async watch<T>(run: Promise<T>): Promise<T> {
    try {
      return await run;
    } catch (e) {
      if (isConnectionLoss(e, false)) this.die(e);
      throw e;
    }
  }
}

async function importDriver(driver: Driver | undefined): Promise<{ driver: Driver; module: unknown }> {
  const tryImport = async (name: Driver): Promise<unknown> => {
    try {
      return await import(name);
    } catch (e) {
      if ((e as { code?: string }).code === "ERR_MODULE_NOT_FOUND") return undefined;
      throw e;
    }
  };
  for (const name of driver === undefined ? (["pg", "postgres"] as const) : [driver]) {
    const module = await tryImport(name);
    if (module !== undefined) return { driver: name, module };
  }
  throw new Error(
    driver === undefined
      ? "sessionLock() needs a driver: npm install pg (node-postgres) or postgres (postgres.js)"
      : `sessionLock(): driver ${JSON.stringify(driver)} is not installed (npm install ${driver})`,
  );
}

interface PgClientCtor {
  new (config: object): {
    connect(): Promise<unknown>;
    end(): Promise<void>;
    on(event: string, listener: (e?: unknown) => void): unknown;
    processID: number | null;
    secretKey: number | null;
    host: string;
    port: number;
    query(config: { text: string; values?: unknown[]; rowMode: "array" }): Promise<{ rows: unknown[] }>;
  };
}

async function openPg(module: unknown, connectionString: string, applicationName: string | undefined): Promise<Conn> {
  const m = module as { default?: { Client: PgClientCtor }; Client?: PgClientCtor };
  const Client = (m.default?.Client ?? m.Client) as PgClientCtor;
  const client = new Client({ connectionString, ...(applicationName === undefined ? {} : { application_name: applicationName }) });
  const death = new Death();
  // An idle connection's end is emitted as events: first the server's FATAL, if it sent one (its
  // reason: 57P01 for pg_terminate_backend, 57P05 for an idle timeout), then "Connection
  // terminated unexpectedly", then 'end'. The first is kept. (An unhandled 'error' event would
  // end the process.)
  client.on("error", (e) => death.die(e));
  client.on("end", () => death.die(Object.assign(new Error("the connection ended"), { code: "08006" })));
  await client.connect();
  return {
    protocolPid: client.processID,
    rows: (sql, args, signal) => death.watch(pgRun(client, sql, args, signal)),
    close: async () => {
      death.closing = true;
      await client.end().catch(() => undefined);
    },
    dead: () => death.dead,
    onDeath: (listener) => death.on(listener),
  };
}

interface PjsSql {
  reserve(): Promise<PjsReserved>;
  end(options?: { timeout?: number }): Promise<void>;
}
interface PjsReserved {
  unsafe(sql: string, args?: unknown[]): { values(): Promise<Row[] & { state?: { pid?: number } }> };
  release(): void;
}

async function openPostgres(module: unknown, connectionString: string, applicationName: string | undefined): Promise<Conn> {
  const postgres = (module as { default: (url: string, options: object) => PjsSql }).default;
  const death = new Death();
  const sql = postgres(connectionString, {
    max: 1,
    prepare: false, // no named prepared statements: a transaction-mode pooler would lose them
    max_lifetime: null, // postgres.js would otherwise close the connection after 30-60 minutes
    idle_timeout: null,
    onnotice: () => undefined,
    // postgres.js drops a FATAL the server sends to an idle connection: only the close is known.
    onclose: () => death.die(Object.assign(new Error("the connection closed (postgres.js does not report why)"), { code: "08006" })),
    ...(applicationName === undefined ? {} : { connection: { application_name: applicationName } }),
  });
  const reserved = await sql.reserve().catch(async (e: unknown) => {
    await sql.end({ timeout: 0 });
    throw e;
  });
  const first = await reserved.unsafe("SELECT 1").values();
  return {
    protocolPid: first.state?.pid ?? null,
    rows: (text, args, signal) => {
      // postgres.js crashes the process (a write on a null socket) when a statement is sent on a
      // reserved connection that has closed: say so instead, as the connection loss it is.
      if (death.dead) return Promise.reject(Object.assign(new Error("the session lock's connection is closed"), { code: "08006", cause: death.cause }));
      return death.watch(pjsRun(reserved as never, text, args, signal));
    },
    close: async () => {
      death.closing = true;
      reserved.release();
      // A dead connection has nothing to finish: postgres.js would wait out the timeout.
      await sql.end({ timeout: death.dead ? 0 : 5 }).catch(() => undefined);
    },
    dead: () => death.dead,
    onDeath: (listener) => death.on(listener),
  };
}

function isConnectionLoss(e: unknown, dead: boolean): boolean {
  const state = sqlstate(e) ?? "";
  // 57P01-57P03: terminated, crash, shutdown; 57P05: an idle-session timeout ended it.
  return dead || state.startsWith("08") || ["57P01", "57P02", "57P03", "57P05"].includes(state);
}

/** A session lock held on its own connection: what sessionLock() resolves to. */
export class SessionLock {
  /** The fencing token: larger for every later acquisition of any lock. */
  token = 0n;
  /** The server backend holding the lock (pg_backend_pid(), not a pooler's pid). */
  pid = 0;
  /** Why the lock was lost, once it was (the connection's error, its reason kept). */
  lost: unknown = null;
  readonly key: bigint;
  readonly #controller = new AbortController();
  /** Aborted, with a LockLostError as its reason, once the lock is lost: at once when its
   * connection dies (the driver's events on the socket, no polling: a pg_terminate_backend, a
   * restart, an idle timeout), or when holding() or release() finds it gone. Hand it to the
   * body's statements and fetches, as a lease's signal. */
  readonly signal: AbortSignal = this.#controller.signal;
  #lostError: LockLostError | null = null;
  #conn: Conn | null = null;
  #prefix = "";
  #nextLxid = 0n;
  #released = false;
  /** Behind a pooler: inside the transaction block that pins the backend. */
  #pinned = false;

  /** @internal */
  constructor(
    readonly ns: string,
    readonly id: string,
    readonly mode: "shared" | "exclusive",
    readonly timeoutMs: number,
  ) {
    this.key = keyOf(ns, id);
  }

  /** @internal */
  async acquire(conn: Conn, probe: () => Promise<number | null>, schema: string | undefined, signal?: AbortSignal): Promise<void> {
    this.#conn = conn;
    let hasWait = await this.#greet(schema, signal);
    if (this.pid !== conn.protocolPid) {
      // A pooler stands between us and the server (its BackendKeyData pid is not the backend's).
      if ((await probe()) === this.pid) {
        throw new UnsafePoolerError(
          `sessionLock(): the connection string leads to a pooler in transaction or statement mode: two connections ` +
            `opened at once were both served by backend ${this.pid} (a session lock taken there would be shared with ` +
            `every client the pooler hands that backend to): ${INSTEAD}`,
        );
      }
      await this.#pin();
      // Inside the block, greet again: the backend it reached (maybe not the first statement's,
      // harmless now that it is pinned) is the one the lock goes on.
      hasWait = await this.#greet(schema, signal);
    }
    // CALL commits first, which it cannot do inside the pinning block: pinned (and in the SQL
    // edition) the whole wait runs inside the try.
    const snapshotFreeWait = hasWait && !this.#pinned;
    let token = await this.#try(snapshotFreeWait ? 0 : this.timeoutMs, signal);
    if (token === null && snapshotFreeWait && this.timeoutMs > 0) {
      let acquired: boolean;
      try {
        const [r] = await conn.rows(qualify(WAIT, this.#prefix), [this.pid, this.key.toString(), this.timeoutMs, this.mode], signal);
        acquired = toBool(r?.[0]);
      } catch (e) {
        // The CALL's key is NULL when it runs on another backend than ours, which it refuses with 22004.
        if (sqlstate(e) === "22004") {
          throw new UnsafePoolerError(
            `sessionLock(): the wait reached another backend than ${this.pid}: a pooler is moving this connection ` +
              `between server sessions (transaction or statement pooling): ${INSTEAD}`,
            { cause: e },
          );
        }
        throw e;
      }
      this.#nextLxid += CALL_LXIDS;
      if (acquired) {
        // Held once by the CALL; a second hold returns the fencing token, then give it back.
        token = await this.#try(0, signal);
        await this.#unlock();
        if (this.lost !== null) throw this.lost;
      }
    }
    if (token === null) {
      const rows = await conn.rows(qualify(WHO, this.#prefix), [this.key.toString()]);
      const holders: Holder[] = rows.map((r) => ({
        pid: Number(r[0]),
        applicationName: (r[1] as string | null) ?? null,
        state: (r[2] as string | null) ?? null,
      }));
      const heldBy = holders
        .map((h) => `PID ${h.pid} (application_name ${JSON.stringify(h.applicationName)}, state ${JSON.stringify(h.state)})`)
        .join("; ");
      throw new LockTimeoutError(
        `could not obtain ${this.mode} session lock on key ${this.key} = advlock_key('${this.ns}', '${this.id}')` +
          ` within ${this.timeoutMs} ms` +
          (heldBy ? `: held by ${heldBy}` : ""),
        holders,
      );
    }
    this.token = token;
    conn.onDeath((cause) => this.#lose(cause));
  }

  /** Record the first reason the lock was lost and abort the signal with it. */
  #lose(cause: unknown): void {
    if (this.lost !== null) return;
    this.lost = cause;
    this.#controller.abort(this.#lockLostError());
  }

  #lockLostError(): LockLostError {
    if (this.#lostError === null) {
      const e = this.lost as { message?: unknown; code?: unknown } | null;
      const code = typeof e?.code === "string" ? ` (SQLSTATE ${e.code})` : "";
      this.#lostError = new LockLostError(
        `the session lock on advlock_key('${this.ns}', '${this.id}') (token ${this.token}) was lost: ${String(e?.message ?? e)}${code}`,
        { cause: this.lost },
      );
    }
    return this.#lostError;
  }

  /**
   * The first statement (again inside the pinning block): the backend and its transaction
   * counter, where advlock lives, whether it has the snapshot-free wait (returned), and, behind a
   * pooler, a refusal when the backend already holds advisory locks it was never asked for.
   */
  async #greet(schema: string | undefined, signal?: AbortSignal): Promise<boolean> {
    const conn = this.#conn as Conn;
    const hello = schema === undefined ? [HELLO(SCHEMA_EXPR), []] : [HELLO("CAST($1 AS text)"), [schema]];
    const [row] = await conn.rows(hello[0] as string, hello[1] as unknown[], signal);
    const [pid, lxid, nspname, database, hasWait, holdsAdvisory] = row as Row;
    this.#prefix = schemaPrefix(nspname, database);
    this.pid = Number(pid);
    // Inside the pinning block every statement is part of one transaction.
    this.#nextLxid = toBigInt(lxid) + (this.#pinned ? 0n : 1n);
    if (this.pid !== conn.protocolPid && toBool(holdsAdvisory)) {
      throw new UnsafePoolerError(
        `sessionLock(): the server session behind this new connection (backend ${this.pid}, reached through a pooler: ` +
          `the protocol announced pid ${conn.protocolPid}) already holds advisory locks this connection never took, so ` +
          `the pooler shares it with other clients (transaction or statement pooling): ${INSTEAD}`,
      );
    }
    return toBool(hasWait);
  }

  /** Open the block that keeps this connection on one server session until the unlock. */
  async #pin(): Promise<void> {
    const conn = this.#conn as Conn;
    try {
      await conn.rows(PIN, []);
    } catch (e) {
      // A statement-mode pooler refuses transaction blocks (and closes the connection).
      throw new UnsafePoolerError(
        `sessionLock(): the pooler refused a transaction block (${String((e as { message?: unknown }).message ?? e)}), so ` +
          `it would not keep one server session for this connection (statement pooling): ${INSTEAD}`,
        { cause: e },
      );
    }
    this.#pinned = true;
  }

  /** Close the pinning block, after the unlock. */
  async #unpin(): Promise<void> {
    const conn = this.#conn as Conn;
    if (this.#pinned && !conn.dead()) await conn.rows(UNPIN, []);
  }

  async #try(waitMs: number, signal?: AbortSignal): Promise<bigint | null> {
    const conn = this.#conn as Conn;
    const [r] = await conn.rows(
      qualify(TRY, this.#prefix),
      [this.pid, this.#nextLxid.toString(), this.ns, this.id, waitMs, this.mode, this.#pinned],
      signal,
    );
    this.#onOurs((r as Row)[0], (r as Row)[1]);
    const token = (r as Row)[2];
    return token === null || token === undefined ? null : toBigInt(token);
  }

  /** Check that a statement ran on the pinned backend with nobody else's transaction in between. */
  #onOurs(pid: unknown, lxid: unknown): void {
    if (Number(pid) !== this.pid) {
      throw new UnsafePoolerError(
        `sessionLock(): this connection's statements reached backend ${pid} after backend ${this.pid}: a pooler is ` +
          `moving it between server sessions (transaction or statement pooling): ${INSTEAD}`,
      );
    }
    const expected = this.#nextLxid % 2n ** 32n;
    const got = toBigInt(lxid);
    if (got !== expected) {
      throw new UnsafePoolerError(
        `sessionLock(): another client ran transactions on backend ${pid} between two statements of this connection ` +
          `(its transaction counter went from ${expected - 1n} to ${got}): a pooler shares the server session ` +
          `(transaction or statement pooling): ${INSTEAD}`,
      );
    }
    // Inside the pinning block every statement is part of one transaction.
    this.#nextLxid = got + (this.#pinned ? 0n : 1n);
  }

  async #unlock(): Promise<void> {
    const conn = this.#conn as Conn;
    const [r] = await conn.rows(qualify(UNLOCK, this.#prefix), [this.pid, this.ns, this.id, this.mode]);
    try {
      this.#onOurs((r as Row)[0], (r as Row)[1]);
    } catch (e) {
      this.#lose(e);
      return;
    }
    if (!toBool((r as Row)[2])) this.#lose(new Error("advlock_unlock found the lock not held"));
  }

  /** Whether this connection still holds the lock (advlock_holding). false, not an error, once
   * the connection is lost (or found shared by a pooler); release() then throws LockLostError. */
  async holding(): Promise<boolean> {
    if (this.lost !== null || this.#released) return false;
    const conn = this.#conn as Conn;
    try {
      const [r] = await conn.rows(qualify(HOLDING, this.#prefix), [this.pid, this.#nextLxid.toString(), this.ns, this.id, this.mode]);
      this.#onOurs((r as Row)[0], (r as Row)[1]);
      return toBool((r as Row)[2]);
    } catch (e) {
      if (e instanceof UnsafePoolerError || isConnectionLoss(e, conn.dead())) {
        this.#lose(e); // a no-op when the death watch already recorded the first cause
        return false;
      }
      throw e;
    }
  }

  /** Unlock and close the connection (whatever happens, the connection is closed, which ends
   * the lock on the server). Throws LockLostError if the lock was lost meanwhile: the code that
   * ran under it was not protected. A second call does nothing. */
  async release(): Promise<void> {
    if (this.#released) return;
    this.#released = true;
    const conn = this.#conn as Conn;
    try {
      if (this.lost === null) {
        try {
          await this.#unlock();
          if (this.lost === null) await this.#unpin();
        } catch (e) {
          if (!isConnectionLoss(e, conn.dead())) throw e;
          this.#lose(e);
        }
      }
    } finally {
      await conn.close();
    }
    if (this.lost !== null) throw this.#lockLostError();
  }

  /** `await using held = await sessionLock(...)` releases it at the end of the block. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}

/** pg_backend_pid() on a second connection opened now, or null when none answered in time. */
async function probePid(open: () => Promise<Conn>): Promise<number | null> {
  let timer: NodeJS.Timeout | undefined;
  const answer = (async () => {
    const second = await open();
    try {
      const [r] = await second.rows(PID, []);
      return Number((r as Row)[0]);
    } finally {
      await second.close();
    }
  })();
  answer.catch(() => undefined);
  const timeout = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), PROBE_WAIT_MS);
  });
  try {
    return await Promise.race([answer, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** @internal How sessionLock() probes for a pooler (not exported by the package). The tests
 * replace probePid with one that answers null, as a busy pool does, to prove that the lock is
 * safe when no probe catches the pooler (S35). */
export const probing = { probePid };

// libpq's key = value syntax: a value is a run of non-blank characters or a single-quoted string in
// which \' and \\ stand for ' and \.
const PAIR = /\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*('(?:[^'\\]|\\.)*'|[^\s']+)\s*/y;

/** A postgres:// URL as is; libpq key=value pairs as the URL both drivers take; else RangeError. */
/** The URL's netloc for libpq's host and port values: a multi-host `host=a,b port=p,q` pairs
 * each host with its port (`a:p,b:q`, the URI form); one port is every host's. */
function hostsAndPorts(host: string, port: string): string {
  const hosts = host.split(",");
  const ports = port === "" ? [] : port.split(",");
  if (ports.length > 1 && ports.length !== hosts.length) {
    throw new RangeError(`connectionString: port names ${ports.length} ports for ${hosts.length} hosts (give one port, or one per host)`);
  }
  return hosts.map((h, i) => h + (ports.length ? ":" + (ports.length === 1 ? ports[0] : ports[i]) : "")).join(",");
}

/** True when the postgres:// URL names more than one host (libpq's multi-host form). */
export function multiHost(url: string): boolean {
  const netloc = /^[a-z]+:\/\/(?:[^@/?#]*@)?([^/?#]*)/i.exec(url)?.[1] ?? "";
  return netloc.includes(",");
}

export function toUrl(dsn: string): string {
  if (/^postgres(ql)?:\/\//i.test(dsn)) return dsn;
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(dsn)) throw new RangeError(`connectionString: needs a postgres:// URL, got a ${dsn.split(":")[0]} URL`);
  const pairs = new Map<string, string>();
  PAIR.lastIndex = 0;
  while (PAIR.lastIndex < dsn.length) {
    const at = PAIR.lastIndex;
    const m = PAIR.exec(dsn);
    if (m === null) throw new RangeError(`connectionString: not a postgres:// URL or libpq key=value string at ${JSON.stringify(dsn.slice(at))}`);
    const v = m[2] as string;
    pairs.set(m[1] as string, v.startsWith("'") ? v.slice(1, -1).replace(/\\(.)/g, "$1") : v);
  }
  if (pairs.size === 0) throw new RangeError("connectionString: empty");
  const take = (k: string): string => {
    const v = pairs.get(k) ?? "";
    pairs.delete(k);
    return v;
  };
  const [user, password, host, port, dbname] = ["user", "password", "host", "port", "dbname"].map(take) as string[];
  const auth = user ? encodeURIComponent(user) + (password ? ":" + encodeURIComponent(password) : "") + "@" : "";
  if (host?.startsWith("/")) pairs.set("host", host); // a Unix-domain socket directory goes in the query
  const netloc = auth + (host?.startsWith("/") ? "" : hostsAndPorts(host ?? "", port ?? ""));
  const query = [...pairs].map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join("&");
  return `postgresql://${netloc}/${encodeURIComponent(dbname ?? "")}${query ? "?" + query : ""}`;
}

function parseSession(connectionString: unknown, ns: string, id: Id, options: SessionLockOptions) {
  if (typeof connectionString !== "string") {
    throw new TypeError(
      `sessionLock() takes a connection string and opens its own connection; got ${describe(connectionString)}. A ` +
        "session lock on a pooled connection outlives your code (the pool hands it, lock included, to the next " +
        "borrower): pass the connection string (for a pg Pool: pool.options.connectionString), or use withLock() in a " +
        "transaction on the pooled connection",
    );
  }
  const url = toUrl(connectionString);
  const checkedNs = checkNs(ns);
  const checkedId = idText(id); // first: options passed in the id's place say so
  const o = checkOptions(options, OPTIONS, "sessionLock");
  if (o["timeoutMs"] === undefined) throw new TypeError("timeoutMs is required: sessionLock(url, ns, id, { timeoutMs: 30000 })");
  const driver = o["driver"];
  if (driver !== undefined && driver !== "pg" && driver !== "postgres") {
    throw new RangeError(`driver must be "pg" or "postgres", got ${describe(driver)}`);
  }
  const app = o["applicationName"];
  if (app !== undefined && typeof app !== "string") throw new TypeError(`applicationName must be a string, got ${describe(app)}`);
  return {
    connectionString: url,
    ns: checkedNs,
    id: checkedId,
    timeoutMs: ms(o["timeoutMs"], "timeoutMs"),
    mode: modeOf(o["shared"]),
    schema: checkSchema(o["schema"]),
    signal: checkSignal(o["signal"]),
    driver: driver as Driver | undefined,
    applicationName: app as string | undefined,
  };
}

/** A session lock on (ns, id), held on a dedicated connection opened from `connectionString`
 * until release(). The connection must be one server session: a pooler in transaction or
 * statement mode is refused (UnsafePoolerError), and behind any pooler the lock lives in one
 * transaction block, from the try to the unlock. Waits at most `timeoutMs`, holding no snapshot
 * (CALL advlock_wait_lock; behind a pooler and in the SQL edition, inside the statement), then
 * LockTimeoutError naming the holder. `token` is a fencing token, `pid` the server backend,
 * `holding()` asks the server whether it is still held, `signal` aborts when its connection dies.
 * The lock's connection opts out of advlock.idle_session_lock_timeout, where the setting exists. */
export async function sessionLock(connectionString: string, ns: string, id: Id, options: SessionLockOptions): Promise<SessionLock> {
  const a = parseSession(connectionString, ns, id, options);
  a.signal?.throwIfAborted();
  const { driver, module } = await importDriver(a.driver);
  if (driver === "pg" && multiHost(a.connectionString)) {
    throw new RangeError(
      "connectionString: names several hosts, and node-postgres (driver \"pg\") has no multi-host connection strings: " +
        'pass driver: "postgres" (postgres.js tries each host in turn and honours target_session_attrs)',
    );
  }
  const open = (): Promise<Conn> =>
    driver === "pg" ? openPg(module, a.connectionString, a.applicationName) : openPostgres(module, a.connectionString, a.applicationName);
  const held = new SessionLock(a.ns, a.id, a.mode, a.timeoutMs);
  const conn = await open();
  try {
    await held.acquire(conn, () => probing.probePid(open), a.schema, a.signal);
  } catch (e) {
    await conn.close(); // closing ends anything left: a wait, a lock granted meanwhile
    throw e;
  }
  return held;
}

/** Run `fn` holding a session lock (see sessionLock), then release it; LockLostError if the lock
 * was lost while `fn` ran (also when `fn` threw: the lost lock is the news). `held.signal` aborts
 * as soon as the lock's connection dies: pass it on to the body's work. */
export async function withSessionLock<T>(
  connectionString: string,
  ns: string,
  id: Id,
  options: SessionLockOptions,
  fn: (held: SessionLock) => Promise<T> | T,
): Promise<T> {
  if (typeof fn !== "function") throw new TypeError(`fn must be a function, got ${describe(fn)}`);
  const held = await sessionLock(connectionString, ns, id, options);
  let result: T;
  try {
    result = await fn(held);
  } catch (e) {
    try {
      await held.release();
    } catch (lost) {
      if (lost instanceof LockLostError) throw lost;
    }
    throw e;
  }
  await held.release();
  return result;
}
