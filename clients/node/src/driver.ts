// One small adapter per driver: how to run a statement (rows as arrays, cancellable through an
// AbortSignal), whether a transaction block is open, and the schema advlock lives in (every
// advlock name in the SQL is written `@.name` and qualified with it). No driver is imported here:
// connections are recognised by shape, so either driver may be missing.
import { connect as netConnect } from "node:net";
import { NotInstalledError } from "./errors.js";
import { describe } from "./key.js";

export type Row = unknown[];

// ---- the drivers' objects, structurally ---------------------------------------------------

/** A node-postgres `Client` (or a `PoolClient`). */
export interface PgClientLike {
  query(config: { text: string; values?: unknown[]; rowMode: "array" }): Promise<{ rows: unknown[] }>;
}

/** What the cancel request reads from a node-postgres client (not in @types/pg). */
interface PgBackendKey {
  processID: number | null;
  secretKey: number | null;
  host: string;
  port: number;
}

/** A node-postgres `Pool`. */
export interface PgPoolLike {
  connect(): Promise<PgClientLike & { release(err?: Error | boolean): void }>;
  query(config: { text: string; values?: unknown[]; rowMode: "array" }): Promise<{ rows: unknown[] }>;
  readonly totalCount: number;
  readonly idleCount: number;
}

interface PjsQuery extends Promise<unknown> {
  values(): PjsQuery;
  cancel(): unknown;
  execute(): PjsQuery;
}

/** A postgres.js `sql` (the pool), a `TransactionSql` (inside `sql.begin`) or a `ReservedSql`. */
export interface PostgresJsLike {
  (strings: TemplateStringsArray, ...values: never[]): unknown;
  unsafe(query: string, parameters?: never[], options?: never): unknown;
}

export type Kind = "pg-client" | "pg-pool" | "pjs-pool" | "pjs-tx" | "pjs-reserved";

export function kindOf(db: unknown, arg = "db"): Kind {
  if (typeof db === "function" && typeof (db as { unsafe?: unknown }).unsafe === "function") {
    const s = db as unknown as Record<string, unknown>;
    if (typeof s["savepoint"] === "function") return "pjs-tx";
    if (typeof s["release"] === "function") return "pjs-reserved";
    if (typeof s["begin"] === "function") return "pjs-pool";
  }
  if (typeof db === "object" && db !== null) {
    const o = db as Record<string, unknown>;
    if (typeof o["query"] === "function" && typeof o["connect"] === "function") {
      if ("totalCount" in o && "idleCount" in o) return "pg-pool";
      if ("processID" in o && "connection" in o) return "pg-client";
    }
  }
  throw new TypeError(
    `${arg}: expected a node-postgres Client, PoolClient or Pool, or a postgres.js sql (or the tx of sql.begin), got ${describe(db)}`,
  );
}

// ---- running a statement, cancellable -----------------------------------------------------

/** Send PostgreSQL's CancelRequest for a node-postgres client's backend and wait until the
 * server has taken it (it closes the connection once the backend is signalled): a statement
 * sent after that cannot be hit by this cancel. */
export function pgCancel(pgClient: PgClientLike): Promise<void> {
  const client = pgClient as PgClientLike & PgBackendKey;
  const { processID, secretKey } = client;
  if (processID === null || secretKey === null) return Promise.resolve();
  return new Promise((resolve) => {
    const socket = client.host.startsWith("/")
      ? netConnect({ path: `${client.host}/.s.PGSQL.${client.port}` })
      : netConnect({ host: client.host, port: client.port });
    const packet = Buffer.alloc(16);
    packet.writeInt32BE(16, 0);
    packet.writeInt32BE(80877102, 4);
    packet.writeInt32BE(processID, 8);
    packet.writeInt32BE(secretKey, 12);
    const done = (): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve();
    };
    const timer = setTimeout(done, 10_000);
    socket.once("connect", () => socket.write(packet));
    socket.once("close", done);
    socket.once("error", done);
  });
}

/** `run`, cancelled on the server when `signal` aborts. A statement that completed anyway is
 * rejected with the abort reason too, unless `resultWins` (the caller must then undo what it got,
 * e.g. release a lease granted as the abort arrived). */
async function withAbort<T>(
  run: Promise<T>,
  cancel: () => Promise<unknown>,
  signal: AbortSignal | undefined,
  resultWins = false,
): Promise<T> {
  if (!signal) return run;
  let cancelling: Promise<unknown> | undefined;
  const onAbort = (): void => {
    cancelling = cancel().catch(() => undefined);
  };
  signal.addEventListener("abort", onAbort, { once: true });
  let result: T;
  try {
    result = await run;
  } catch (e) {
    if (signal.aborted) {
      await cancelling;
      throw signal.reason;
    }
    throw e;
  } finally {
    signal.removeEventListener("abort", onAbort);
  }
  if (cancelling) {
    await cancelling; // the cancel may still land: wait until the server has taken it
  }
  if (signal.aborted && !resultWins) throw signal.reason;
  return result;
}

export async function pgRun(client: PgClientLike, text: string, values: unknown[], signal?: AbortSignal, resultWins = false): Promise<Row[]> {
  signal?.throwIfAborted();
  const run = client.query({ text, values, rowMode: "array" });
  const result = await withAbort(run, () => pgCancel(client), signal, resultWins);
  return result.rows as Row[];
}

// Neither driver is asked for a named server-side prepared statement: a pooler in transaction
// mode (PgBouncer before 1.21) hands the next statement to a backend that does not have it.
// node-postgres prepares only a query given a `name` (none here: the unnamed statement, parsed
// and run in one go); postgres.js prepares its tagged queries by default (`prepare: true`) but
// not its unsafe() ones (3.4): asked for explicitly here, whatever the application's setting.
export async function pjsRun(sql: PostgresJsLike, text: string, values: unknown[], signal?: AbortSignal, resultWins = false): Promise<Row[]> {
  signal?.throwIfAborted();
  const q = (sql.unsafe(text, values as never[], { prepare: false } as never) as PjsQuery).values();
  q.execute();
  const rows = await withAbort(q, async () => q.cancel(), signal, resultWins);
  return rows as Row[];
}

/** Run a statement on one connection (a pg client, or a postgres.js sql of any kind). */
export function run(db: PgClientLike | PostgresJsLike, kind: Kind, text: string, values: unknown[], signal?: AbortSignal): Promise<Row[]> {
  return kind === "pg-client" ? pgRun(db as PgClientLike, text, values, signal) : pjsRun(db as PostgresJsLike, text, values, signal);
}

// ---- transaction status -------------------------------------------------------------------

/** Why a transaction-scope lock taken on `db` now would protect nothing, or null when fine. */
export function xactProblem(db: unknown, kind: Kind, forLock = true): string | null {
  switch (kind) {
    case "pjs-tx":
      return null;
    case "pjs-pool":
      return "a postgres.js sql runs each statement in its own transaction: call it with the tx of `sql.begin(async (tx) => ...)`, or use withLock(sql, ...), which opens one";
    case "pjs-reserved":
      return "advlock cannot tell whether a postgres.js reserved connection is in a transaction: use `sql.begin(async (tx) => ...)` and pass tx";
    case "pg-pool":
      return "a node-postgres Pool runs each query on any connection, in its own transaction: use withLock(pool, ...), which checks out a client and opens a transaction, or pass a client inside BEGIN ... COMMIT";
    case "pg-client": {
      const status = (db as { _txStatus?: unknown })._txStatus;
      if (status === "T") return null;
      if (status === "E") return "the transaction is aborted (a previous statement failed): roll it back first";
      if (status === "I") {
        return forLock
          ? "no transaction is open on this client: run it after `await client.query('BEGIN')`, or use withLock(client, ...), which opens one"
          : "no transaction is open on this client: call it after `await client.query('BEGIN')`, in the transaction that writes";
      }
      return "this node-postgres version does not report the transaction status (pg >= 8.23 does): upgrade pg";
    }
  }
}

// ---- where advlock lives ------------------------------------------------------------------

// The schema of the advlock extension, or else of the SQL edition (the schema of advlock_key()
// that comes first on search_path, then by name); NULL when neither is installed.
export const SCHEMA_EXPR =
  "(SELECT coalesce(" +
  "(SELECT n.nspname FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace" +
  " WHERE e.extname = 'advlock')," +
  " (SELECT n.nspname FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace" +
  " WHERE p.proname = 'advlock_key'" +
  " ORDER BY pg_catalog.array_position(pg_catalog.current_schemas(false), n.nspname) NULLS LAST, n.nspname" +
  " LIMIT 1)))";
const LOOKUP_SQL = `SELECT ${SCHEMA_EXPR}, pg_catalog.current_database()`;

export function quoteIdent(name: string): string {
  return '"' + name.replaceAll('"', '""') + '"';
}

/** The `"schema".` prefix from the lookup's row, or NotInstalledError naming the fix. */
export function schemaPrefix(schema: unknown, database: unknown): string {
  if (schema === null || schema === undefined) {
    throw new NotInstalledError(
      `advlock is not installed in database ${JSON.stringify(database)}: run CREATE EXTENSION advlock there (or install ` +
        "the SQL edition, edition/advlock_sql.sql), or pass the schema option naming the schema it is installed in",
    );
  }
  return quoteIdent(String(schema)) + ".";
}

// The prefix found, kept as long as the connection (or postgres.js pool) lives: pools hand out
// the same connections again, so the lookup costs one round trip per connection.
const found = new WeakMap<object, string>();

export function qualify(sql: string, prefix: string): string {
  return sql.replaceAll("@.", prefix);
}

/** The schema prefix for statements on `db` (looked up once per connection). `cacheOn` is the
 * object the answer is remembered for (the pg client, or the postgres.js pool a tx came from). */
export async function prefixFor(
  db: PgClientLike | PostgresJsLike,
  kind: Kind,
  schema: string | undefined,
  cacheOn: object = db,
): Promise<string> {
  if (schema !== undefined) return quoteIdent(schema) + ".";
  const cached = found.get(cacheOn);
  if (cached !== undefined) return cached;
  const [row] = await run(db, kind, LOOKUP_SQL, []);
  const prefix = schemaPrefix(row?.[0], row?.[1]);
  found.set(cacheOn, prefix);
  return prefix;
}
