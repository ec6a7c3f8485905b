"""Fixtures for the failover suite: PostgreSQL clusters of its own (a primary, a streaming standby)
with advlock preloaded, which the tests crash, restart and promote. They are made from the
PostgreSQL pg_test/run.sh runs (PGBIN), under its work directory, on ADVLOCK_FAILOVER_PORT and
the port after it (default 5452, 5453); the instance pg_test/run.sh started is not used."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pgtestsupport import PGBIN, wait_until  # noqa: E402

WORKDIR = os.environ.get("ADVLOCK_WORKDIR", "")
BASE_PORT = int(os.environ.get("ADVLOCK_FAILOVER_PORT", "5452"))
STATEMENT_TIMEOUT_MS = 60000


def as_postgres(*cmd, check=True, timeout=120, **kw):
    """Runs a command as the postgres OS user (servers refuse to run as root)."""
    import pwd
    me = pwd.getpwuid(os.geteuid()).pw_name
    full = list(cmd) if me == "postgres" else ["sudo", "-u", "postgres", "--", *cmd]
    return subprocess.run(full, check=check, timeout=timeout, capture_output=True, text=True, **kw)


class Cluster:
    """One PostgreSQL data directory of this suite, its port and log."""

    def __init__(self, name, port):
        self.dir = os.path.join(WORKDIR, "failover")
        self.data = os.path.join(self.dir, name)
        self.log = os.path.join(self.dir, f"{name}.log")
        self.port = port

    def conninfo(self, app, dbname="advlock_failover"):
        return psycopg.conninfo.make_conninfo(
            host="127.0.0.1", port=self.port, dbname=dbname, user="postgres", application_name=app,
            connect_timeout=10, options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}")

    def connect(self, app, dbname="advlock_failover"):
        return psycopg.connect(self.conninfo(app, dbname), autocommit=True)

    def ctl(self, *args, check=True):
        return as_postgres(f"{PGBIN}/pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", "120", *args,
                           check=check)

    def start(self):
        self.ctl("start")
        self.wait_ready()

    def wait_ready(self):
        def ready():
            try:
                with self.connect("failover-probe", "postgres"):
                    return True
            except psycopg.OperationalError:
                return False
        wait_until(ready, timeout=120, interval=0.1, what=f"the server on port {self.port}")

    def crash(self):
        """A crash: a backend is killed (SIGKILL), so the postmaster ends every process,
        reinitialises shared memory (an empty lease table, no state file) and runs crash
        recovery from the last checkpoint: the leases come back from the WAL alone."""
        before = self.log_text().count("all server processes terminated; reinitializing")
        with self.connect("failover-victim", "postgres") as victim:
            pid = victim.execute("SELECT pg_backend_pid()").fetchone()[0]
            as_postgres("kill", "-9", str(pid))
            wait_until(lambda: self.log_text().count("all server processes terminated; reinitializing") > before,
                       timeout=60, interval=0.05, what="the postmaster to reinitialise after the crash")
        self.wait_ready()

    def stop_immediately(self):
        """pg_ctl stop -m immediate: no shutdown checkpoint; recovery replays the WAL at the next
        start (onto the table the postmaster saved as it exited)."""
        self.ctl("-m", "immediate", "stop")

    def stop(self):
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            if self.ctl("-m", "fast", "stop", check=False).returncode != 0:
                self.ctl("-m", "immediate", "stop", check=False)

    def append_conf(self, text):
        as_postgres("sh", "-c", f"cat >> '{self.data}/postgresql.conf'", input=text)

    def log_text(self):
        try:
            return Path(self.log).read_text(errors="replace")
        except OSError:
            return ""


def make_primary(lock_delay_ms=0):
    """A new primary with advlock preloaded and database advlock_failover (extension created)."""
    if not WORKDIR:
        pytest.skip("ADVLOCK_WORKDIR not set (run through pg_test/run.sh failover)")
    primary = Cluster("primary", BASE_PORT)
    primary.stop()
    shutil.rmtree(primary.data, ignore_errors=True)
    os.makedirs(primary.dir, exist_ok=True)
    shutil.chown(primary.dir, "postgres")
    as_postgres(f"{PGBIN}/initdb", "-D", primary.data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
                "--locale=C.UTF-8", "--no-sync")
    primary.append_conf(
        f"\n# failover suite\nport = {primary.port}\nlisten_addresses = '127.0.0.1'\n"
        f"unix_socket_directories = '{primary.dir}'\nshared_preload_libraries = 'advlock'\n"
        f"advlock.lease_lock_delay = {lock_delay_ms}\nlog_line_prefix = '%m [%p] %q%a '\n"
        "wal_level = replica\nhot_standby = on\n")
    primary.start()
    with primary.connect("failover-setup", "postgres") as c:
        c.execute("CREATE DATABASE advlock_failover")
    with primary.connect("failover-setup") as c:
        c.execute("CREATE EXTENSION advlock")
    return primary


def make_standby(primary):
    """A streaming standby of `primary` (pg_basebackup -R), started and in recovery."""
    standby = Cluster("standby", BASE_PORT + 1)
    standby.stop()
    shutil.rmtree(standby.data, ignore_errors=True)
    as_postgres(f"{PGBIN}/pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
                "-D", standby.data, "-R", "-X", "stream", "-c", "fast")
    standby.append_conf(f"\n# failover suite standby\nport = {standby.port}\n")
    standby.start()
    with standby.connect("failover-probe") as c:
        assert c.execute("SELECT pg_is_in_recovery()").fetchone()[0] is True
    return standby


@pytest.fixture
def primary():
    cluster = make_primary()
    yield cluster
    cluster.stop()


@pytest.fixture
def clusters():
    """A primary with advlock.lease_lock_delay = 1.5 s (inherited by its standby) and its standby."""
    primary = make_primary(lock_delay_ms=1500)
    standby = None
    try:
        standby = make_standby(primary)
        yield primary, standby
    finally:
        for c in (standby, primary):
            if c is not None:
                c.stop()


def wait_for_replay(primary, standby, timeout=30):
    """Waits until the standby replayed everything the primary wrote so far."""
    with primary.connect("failover-lsn") as p:
        lsn = p.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
    with standby.connect("failover-replay") as s:
        wait_until(lambda: s.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)).fetchone()[0],
                   timeout=timeout, interval=0.05, what="the standby to replay the primary's WAL")


def now_server(conn):
    return conn.execute("SELECT clock_timestamp()").fetchone()[0]


def elapsed_since(t0):
    return time.monotonic() - t0
