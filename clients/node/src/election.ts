// Following the leader of a key (advlock_leader, CALL advlock_wait_leader; needs advlock
// preloaded): observe() yields the leader now, then every change, each wait on the server woken by
// the change itself (a term granted, resigned or expired), not by polling. Campaigning is leader()
// in lease.ts: a term is a one-slot lease.
import { checkOptions, checkSchema, checkSignal, ms, toBigInt, toBool } from "./args.js";
import { type Row } from "./driver.js";
import { type Id, checkNs, describe, idText, keyOf } from "./key.js";
import { type LeaseSource, leaseRunner, unavailable } from "./lease.js";

const LEADER_NOW =
  "SELECT CAST(term AS text), candidate, since, expires_at, pid, application_name FROM @.advlock_leader(CAST($1 AS text), CAST($2 AS text))";
// Waits until the leader differs from known_term (NULL: "no leader"), at most timeout_ms; commits
// first and holds no snapshot (a pooled connection is outside a transaction block when lent).
const WAIT_LEADER = "CALL @.advlock_wait_leader(CAST($1 AS int8), CAST($2 AS int4), CAST($3 AS int8))";

/** The leader of a key as the server reports it (advlock_leader). */
export interface Leader {
  /** The term: a fencing token, larger than every earlier term of the key. */
  readonly term: bigint;
  /** The candidate that campaigned (null for a plain lease on the key). */
  readonly candidate: string | null;
  /** When the term began. */
  readonly since: Date | null;
  /** When it ends unless renewed. */
  readonly expiresAt: Date | null;
  /** The backend that took or last renewed it. */
  readonly pid: number | null;
  readonly applicationName: string | null;
}

export interface ObserveOptions {
  /** A term the caller already knows: not yielded again first. */
  knownTerm?: bigint | number;
  /** Each wait's bound on the server, in milliseconds (default 30000); then it waits again. */
  waitMs?: number;
  /** The schema advlock is installed in (default: found once per connection). */
  schema?: string;
  /** Aborting it ends the wait on the server and the iteration (with the abort reason). */
  signal?: AbortSignal;
}

const OBSERVE_OPTIONS = ["knownTerm", "waitMs", "schema", "signal"] as const;

function leaderOf(r: Row): Leader {
  return {
    term: toBigInt(r[0]),
    candidate: (r[1] as string | null) ?? null,
    since: (r[2] as Date | null) ?? null,
    expiresAt: (r[3] as Date | null) ?? null,
    pid: r[4] === null || r[4] === undefined ? null : Number(r[4]),
    applicationName: (r[5] as string | null) ?? null,
  };
}

/** Follow the leader of (ns, id) on `pool` (a node-postgres Pool or a postgres.js sql): yields
 * the leader now (a Leader, or null when nobody leads), unless its term is `knownTerm`, then the
 * leader every time it changes (null after a resignation or an expiry nobody took over). Each
 * wait is one `CALL advlock_wait_leader` on a pooled connection, at most `waitMs` on the server,
 * woken by the change itself and holding no snapshot; then it waits again. Stop by leaving the
 * `for await` loop (or aborting `signal`). Needs advlock in shared_preload_libraries. */
export function observe(pool: LeaseSource, ns: string, id: Id = "", options: ObserveOptions = {}): AsyncGenerator<Leader | null, void, undefined> {
  const o = checkOptions(options, OBSERVE_OPTIONS, "observe");
  checkNs(ns);
  const idt = idText(id);
  const waitMs = ms(o["waitMs"] ?? 30_000, "waitMs");
  if (waitMs === 0) throw new RangeError("waitMs must be a positive number of milliseconds (each wait's bound), got 0");
  const knownTerm = o["knownTerm"];
  if (knownTerm !== undefined && typeof knownTerm !== "bigint" && !(typeof knownTerm === "number" && Number.isSafeInteger(knownTerm))) {
    throw new TypeError(`knownTerm must be a term (a bigint), got ${describe(knownTerm)}`);
  }
  const knownAtStart = knownTerm === undefined ? null : BigInt(knownTerm);
  const schema = checkSchema(o["schema"]);
  const signal = checkSignal(o["signal"]);
  const runner = leaseRunner(pool, schema);
  const key = keyOf(ns, idt).toString();

  async function* follow(): AsyncGenerator<Leader | null, void, undefined> {
    const asked = async (sql: string, args: unknown[]): Promise<Row[]> => {
      try {
        return await runner.query(sql, args, signal);
      } catch (e) {
        throw unavailable(e) ?? e;
      }
    };
    // First the leader now (the server's wait reports a change from a known term, "no leader"
    // included, so a first null is read here, not waited for).
    const [first] = await asked(LEADER_NOW, [ns, idt]);
    const now = first === undefined ? null : leaderOf(first);
    let known = knownAtStart;
    if (known === null || now === null || now.term !== known) {
      known = now === null ? null : now.term;
      yield now;
    }
    for (;;) {
      const [r] = await asked(WAIT_LEADER, [key, waitMs, known === null ? null : known.toString()]);
      const [term, changed, candidate] = r as Row;
      if (!toBool(changed)) continue; // the wait ran out: wait again
      let current: Leader | null = null;
      if (term !== null && term !== undefined) {
        const t = toBigInt(term);
        const details = (await asked(LEADER_NOW, [ns, idt])).map(leaderOf).find((l) => l.term === t);
        current = details ?? { term: t, candidate: (candidate as string | null) ?? null, since: null, expiresAt: null, pid: null, applicationName: null };
      }
      known = current === null ? null : current.term;
      yield current;
    }
  }
  return follow();
}
