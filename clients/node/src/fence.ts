// Checks at the start of a write's own transaction (docs/fences.md): fence() refuses a stale
// token (advlock_fence, LK001), leaseCheck() a lease or term that has ended (advlock_lease_check,
// LK002). Both abort the transaction they run in, so the write is never committed.
import { checkOptions, checkSchema } from "./args.js";
import { type PgClientLike, type PostgresJsLike, kindOf, prefixFor, qualify, run, xactProblem } from "./driver.js";
import { FenceRefusedError, LeaseNotHeldError, NotInTransactionError, sqlstate } from "./errors.js";
import { type Id, checkNs, describe, idText } from "./key.js";
import { unavailable } from "./lease.js";

const FENCE = "SELECT 1 FROM @.advlock_fence(CAST($1 AS text), CAST($2 AS text), CAST($3 AS int8))";
const LEASE_CHECK = "SELECT 1 FROM @.advlock_lease_check(CAST($1 AS int8))";
const PASSED = /token (\d+) has passed it/;
const INT8_MAX = 2n ** 63n - 1n;

/** A connection in the write's transaction: a node-postgres client after BEGIN, or the tx of
 * postgres.js `sql.begin`. */
export type WriteTransaction = PgClientLike | PostgresJsLike;

function checkToken(token: unknown, name: string): bigint {
  if (typeof token !== "bigint" && !(typeof token === "number" && Number.isSafeInteger(token))) {
    throw new TypeError(`${name} must be a fencing token (a bigint, or an integer number), got ${describe(token)}`);
  }
  const t = BigInt(token);
  if (t < 1n || t > INT8_MAX) throw new RangeError(`${name} must be a positive bigint (advlock's tokens are), got ${t}`);
  return t;
}

const NEEDS = {
  fence: "records its token with the write transaction",
  leaseCheck: "checks the lease for the write transaction",
} as const;

async function checked(db: unknown, what: keyof typeof NEEDS, sql: string, args: unknown[], token: bigint, schema: unknown): Promise<void> {
  const s = checkSchema(schema);
  const kind = kindOf(db);
  const problem =
    kind === "pg-pool" || kind === "pjs-pool"
      ? "a pool runs each statement on any connection, in its own transaction: pass the client of the write's transaction (after BEGIN), or the tx of sql.begin()"
      : xactProblem(db, kind, false);
  if (problem !== null) throw new NotInTransactionError(`advlock.${what}() ${NEEDS[what]}, but ${problem}`);
  const conn = db as PgClientLike | PostgresJsLike;
  try {
    const prefix = await prefixFor(conn, kind, s);
    await run(conn, kind, qualify(sql, prefix), args);
  } catch (e) {
    throw fenceError(e, token) ?? (what === "leaseCheck" ? unavailable(e) : null) ?? e;
  }
}

function fenceError(e: unknown, token: bigint): Error | null {
  const code = sqlstate(e);
  if (code !== "LK001" && code !== "LK002") return null;
  const err = e as { message?: unknown; detail?: unknown };
  const message = String(err.message ?? e);
  const detail = typeof err.detail === "string" ? err.detail : null;
  if (code === "LK001") {
    const m = PASSED.exec(message);
    return new FenceRefusedError(message, token, m ? BigInt(m[1] as string) : null, detail, { cause: e });
  }
  return new LeaseNotHeldError(detail ? `${message}\nDETAIL: ${detail}` : message, { cause: e });
}

/** Pass the fence of (ns, id) with `token` in the write's transaction (advlock_fence), on the
 * client after BEGIN or the postgres.js tx that writes: FenceRefusedError (LK001) when a larger
 * token has already passed it (a newer holder took over: the transaction is aborted, roll it
 * back), else the token is recorded with the transaction. Call it first in the transaction,
 * before the writes it protects. */
export async function fence(db: WriteTransaction, ns: string, id: Id, token: bigint | number, options: { schema?: string } = {}): Promise<void> {
  const o = checkOptions(options, ["schema"], "fence");
  const args = [checkNs(ns), idText(id), checkToken(token, "token").toString()];
  await checked(db, "fence", FENCE, args, BigInt(token), o["schema"]);
}

/** LeaseNotHeldError (advlock_lease_check, LK002; a LeaseLostError) unless the lease or term
 * `token` is still held, inside the write's transaction (which the error aborts). Needs advlock
 * preloaded (NotPreloadedError; the SQL edition: LeasesUnavailableError). */
export async function leaseCheck(db: WriteTransaction, token: bigint | number, options: { schema?: string } = {}): Promise<void> {
  const o = checkOptions(options, ["schema"], "leaseCheck");
  const t = checkToken(token, "token");
  await checked(db, "leaseCheck", LEASE_CHECK, [t.toString()], t, o["schema"]);
}
