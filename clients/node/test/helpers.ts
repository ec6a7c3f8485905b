// Shared fixtures: a real PostgreSQL with advlock, named by ADVLOCK_NODE_DSN (set by
// clients/node/run_tests.sh). Every assertion about locks reads pg_locks.
import { spawn } from "node:child_process";
import { chownSync, mkdtempSync, readFileSync, rmSync, writeFileSync, chmodSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach } from "node:test";
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

/** A real PgBouncer in front of DSN's database in `poolMode`, run as the postgres OS user (as
 * the Python client's tests do). Session mode keeps PgBouncer's default server_reset_query. */
export async function pgbouncer(poolMode: "transaction" | "statement" | "session", poolSize = 2): Promise<Bouncer> {
  const target = new URL(DSN);
  const dbname = target.pathname.slice(1);
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), `advlock-node-pgbouncer-${poolMode}.`));
  chmodSync(dir, 0o755);
  const userlist = join(dir, "userlist.txt");
  const ini = join(dir, "pgbouncer.ini");
  writeFileSync(userlist, '"postgres" ""\n');
  writeFileSync(
    ini,
    `[databases]\n${dbname} = host=${target.hostname} port=${target.port} dbname=${dbname}\n\n` +
      `[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = ${port}\nunix_socket_dir =\nauth_type = trust\nauth_file = ${userlist}\n` +
      `pool_mode = ${poolMode}\ndefault_pool_size = ${poolSize}\nmin_pool_size = 0\nreserve_pool_size = 0\n` +
      `max_client_conn = 100\nignore_startup_parameters = extra_float_digits,options,statement_timeout\n` +
      `logfile = ${dir}/pgbouncer.log\npidfile = ${dir}/pgbouncer.pid\n`,
  );
  const pwd = readFileSync("/etc/passwd", "utf8").split("\n").find((l) => l.startsWith("postgres:"));
  const [uid, gid] = pwd ? [Number(pwd.split(":")[2]), Number(pwd.split(":")[3])] : [0, 0];
  for (const p of [dir, userlist, ini]) chownSync(p, uid, gid);
  const bin = "/usr/sbin/pgbouncer";
  const cmd = process.getuid?.() === uid ? [bin, ini] : ["sudo", "-n", "-u", "postgres", "--", bin, ini];
  const proc = spawn(cmd[0] as string, cmd.slice(1), { stdio: "ignore" });
  const dsn = `postgresql://postgres@127.0.0.1:${port}/${dbname}`;
  const log = (): string => {
    try {
      return readFileSync(join(dir, "pgbouncer.log"), "utf8").slice(-3000);
    } catch (e) {
      return `(no log: ${String(e)})`;
    }
  };
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`pgbouncer exited with ${proc.exitCode}: ${log()}`);
    const c = new pg.Client({ connectionString: dsn });
    c.on("error", () => undefined);
    try {
      await c.connect();
      await c.query("SELECT 1");
      await c.end();
      break;
    } catch {
      await c.end().catch(() => undefined);
      if (Date.now() > deadline) throw new Error(`pgbouncer did not start: ${log()}`);
      await sleep(100);
    }
  }
  return {
    dsn,
    stop: async () => {
      const exited = new Promise((r) => proc.once("exit", r));
      proc.kill("SIGTERM"); // sudo relays SIGTERM to pgbouncer
      await Promise.race([exited, sleep(10_000)]);
      if (proc.exitCode === null) proc.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
