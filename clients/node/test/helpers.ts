// Shared fixtures: a real PostgreSQL with advlock, named by ADVLOCK_NODE_DSN (set by
// clients/node/run_tests.sh). Every assertion about locks reads pg_locks.
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { afterEach } from "node:test";
import { fileURLToPath } from "node:url";
import pg from "pg";

export const DSN = process.env["ADVLOCK_NODE_DSN"] ?? "postgresql://postgres@127.0.0.1:5570/advlock_node";

/** A node-postgres client with the backend pid it was told (not in @types/pg). */
export type PgClient = pg.Client & { readonly processID: number };

export async function connect(app = "advlock-test", dsn = DSN): Promise<PgClient> {
  // statement_timeout guards the suite against a hang; advlock never relies on it.
  const c = new pg.Client({ connectionString: dsn, application_name: app, options: "-c statement_timeout=20000" });
  c.on("error", () => undefined);
  await c.connect();
  return c as PgClient;
}

export async function withAdmin<T>(fn: (admin: pg.Client) => Promise<T>): Promise<T> {
  const admin = await connect("advlock-test-admin");
  try {
    return await fn(admin);
  } finally {
    await admin.end();
  }
}

export type LockRow = [number, boolean, string, string];

/** [pid, granted, mode, key] of every advisory lock entry in this database, optionally of one pid. */
export async function advisoryLocks(admin: pg.Client, pid?: number): Promise<LockRow[]> {
  const r = await admin.query({
    text:
      "SELECT pid, granted, mode, CAST((classid::int8 << 32) | objid::int8 AS text) FROM pg_locks" +
      " WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())" +
      " AND ($1::int IS NULL OR pid = $1::int) ORDER BY pid",
    values: [pid ?? null],
    rowMode: "array",
  });
  return r.rows as LockRow[];
}

export async function waitUntil<T>(predicate: () => Promise<T> | T, what: string, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await predicate();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

export async function waiting(admin: pg.Client, pid: number): Promise<boolean> {
  return (await advisoryLocks(admin, pid)).some((r) => !r[1]);
}

export async function backends(admin: pg.Client, app: string): Promise<number[]> {
  const r = await admin.query({ text: "SELECT pid FROM pg_stat_activity WHERE application_name = $1", values: [app], rowMode: "array" });
  return r.rows.map((x) => Number((x as unknown[])[0]));
}

export type Kind = "preloaded" | "extension" | "edition";
let kind: Kind | undefined;

/** "preloaded" (leases work), "extension" (installed, not preloaded) or "edition" (the SQL edition). */
export async function serverKind(): Promise<Kind> {
  if (kind === undefined) {
    kind = await withAdmin(async (admin) => {
      const r = await admin.query({
        text:
          "SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'advlock')," +
          " 'advlock' = ANY (string_to_array(replace(current_setting('shared_preload_libraries'), ' ', ''), ','))",
        rowMode: "array",
      });
      const [ext, pre] = r.rows[0] as [boolean, boolean];
      return ext ? (pre ? "preloaded" : "extension") : "edition";
    });
  }
  return kind;
}

export const LEASES_SKIP: Record<Kind, string | false> = {
  preloaded: false,
  extension: "leases need advlock in shared_preload_libraries; this server has the extension without it (run_tests.sh runs them on its preloaded instance)",
  edition: "the SQL edition has no leases (they live in advlock's shared memory)",
};

export async function leaseRows(admin: pg.Client): Promise<[string, boolean, number][]> {
  const r = await admin.query({ text: "SELECT CAST(lease AS text), granted, pid FROM advlock_leases ORDER BY lease", rowMode: "array" });
  return r.rows as [string, boolean, number][];
}

/** Every test must leave no advisory lock (and no lease) behind: a leak would be a bug in the package. */
export function nothingLeftAfterEach(): void {
  afterEach(async () => {
    await withAdmin(async (admin) => {
      await waitUntil(async () => (await advisoryLocks(admin)).length === 0, "no advisory lock left", 5000);
      if ((await serverKind()) === "preloaded") {
        await waitUntil(async () => (await leaseRows(admin)).length === 0, "no lease left", 5000);
      }
    });
  });
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      s.close(() => (typeof a === "object" && a ? resolve(a.port) : reject(new Error("no port"))));
    });
  });
}

export interface Bouncer {
  dsn: string;
  stop(): Promise<void>;
}

// The repository's one PgBouncer launcher (the Python and Ruby suites use it too), from build/test/.
const LAUNCHER = fileURLToPath(new URL("../../../../pg_test/pgbouncer_launcher.py", import.meta.url));

/** A real PgBouncer in front of DSN's database in `poolMode` with a pool of `poolSize`, run as the
 * postgres OS user by pg_test/pgbouncer_launcher.py, a subprocess that prints PgBouncer's URL once
 * a query goes through it and stops PgBouncer when its standard input closes. Session mode keeps
 * PgBouncer's default server_reset_query. */
export async function pgbouncer(poolMode: "transaction" | "statement" | "session", poolSize = 2): Promise<Bouncer> {
  const args = [LAUNCHER, "run", "--target", DSN, "--mode", poolMode, "--pool-size", String(poolSize),
    "--set", "min_pool_size=0", "--set", "ignore_startup_parameters=extra_float_digits,options,statement_timeout",
    "--prefix", `advlock-node-pgbouncer-${poolMode}.`];
  const proc = spawn("python3", args, { stdio: ["pipe", "pipe", "pipe"] });
  // "close": the process exited and its output is all read.
  const exited = new Promise<void>((r) => proc.once("close", () => r()));
  proc.stdin.on("error", () => undefined); // EPIPE from a launcher that already exited
  let out = "";
  let err = "";
  proc.stdout.setEncoding("utf8");
  proc.stderr.setEncoding("utf8");
  proc.stderr.on("data", (d: string) => (err += d));
  const dsn = await new Promise<string>((resolve, reject) => {
    proc.stdout.on("data", (d: string) => {
      out += d;
      const nl = out.indexOf("\n");
      if (nl >= 0) resolve(out.slice(0, nl));
    });
    proc.once("error", reject);
    // After the URL this settles nothing; before it, the launcher failed (its stderr says why).
    void exited.then(() => reject(new Error(`pgbouncer did not start (launcher exit ${proc.exitCode}): ${err}`)));
  });
  return {
    dsn,
    stop: async () => {
      proc.stdin.end(); // the launcher stops PgBouncer, removes its directory and exits
      await Promise.race([exited, sleep(30_000)]);
      if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL");
    },
  };
}
