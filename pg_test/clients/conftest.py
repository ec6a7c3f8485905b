"""Fixtures for the client suite: an admin connection and a check after every test that it left
no advisory lock behind (both pg_test/pgtestsupport.py's), and a PgBouncer in transaction mode."""
import os
import pwd
import shutil
import subprocess
import tempfile
import time

import psycopg
import pytest

import pgsupport  # first: puts docs/keys (the published advlock_key.py) on sys.path

MEASUREMENTS = []


@pytest.fixture
def measure(request):
    """measure(label, value): a number observed on this machine, printed after the run."""
    def record(label, value):
        MEASUREMENTS.append((request.node.name, label, value))
    return record


def pytest_terminal_summary(terminalreporter):
    if MEASUREMENTS:
        terminalreporter.section("advlock client measurements")
        for test, label, value in MEASUREMENTS:
            terminalreporter.write_line(f"{test}: {label} = {value}")


BOUNCER_PORT = int(os.environ.get("ADVLOCK_PGBOUNCER_PORT", "6422"))
PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


# An observer/administrator connection (autocommit) with a 200 ms idle threshold.
admin = pgsupport.PG.admin_fixture("advlock-test/admin", setup=("SET advlock.idle_threshold = '200ms'",))
# Every test must release what it took; leftovers fail it and are terminated so they do not
# disturb the next one.
no_leftover_locks = pgsupport.PG.no_advisory_locks_left_fixture("advlock-test/leak-check", timeout=5, terminate=True)


class Bouncer:
    def __init__(self, port, directory, proc):
        self.port = port
        self.directory = directory
        self.proc = proc

    def conninfo(self, app: str) -> str:
        return pgsupport.conninfo(app, port=self.port)

    def connect(self, app: str, autocommit: bool = True) -> psycopg.Connection:
        # Transaction pooling: no server-side prepared statements (PgBouncer 1.18 cannot
        # route them), so psycopg must never prepare.
        return psycopg.connect(self.conninfo(app), autocommit=autocommit, prepare_threshold=None)

    def console(self) -> psycopg.Connection:
        """The PgBouncer admin console (simple query protocol only)."""
        return psycopg.connect(pgsupport.conninfo("advlock-test/console", port=self.port, dbname="pgbouncer"),
                               autocommit=True, prepare_threshold=None)

    def show(self, what: str) -> list:
        with self.console() as con:
            cur = con.cursor(row_factory=psycopg.rows.dict_row)
            return cur.execute(f"SHOW {what}").fetchall()

    def log(self) -> str:
        try:
            with open(os.path.join(self.directory, "pgbouncer.log")) as f:
                return f.read()[-4000:]
        except OSError as e:
            return f"(no log: {e})"


@pytest.fixture(scope="session")
def pgbouncer():
    """PgBouncer (transaction pooling, pool of 2 server connections) in front of the test
    instance on 127.0.0.1:6422, run as the postgres OS user; always stopped at the end."""
    if not os.path.exists(PGBOUNCER):
        pytest.fail("pgbouncer is not installed (scripts/setup.sh installs it)")
    postgres = pwd.getpwnam("postgres")
    base = os.environ.get("ADVLOCK_WORKDIR") or tempfile.gettempdir()
    directory = tempfile.mkdtemp(prefix="pgbouncer.", dir=base)
    userlist = os.path.join(directory, "userlist.txt")
    ini = os.path.join(directory, "pgbouncer.ini")
    with open(userlist, "w") as f:
        f.write('"postgres" ""\n')
    with open(ini, "w") as f:
        f.write(f"""\
[databases]
{pgsupport.DATABASE} = host={pgsupport.HOST} port={pgsupport.PORT} dbname={pgsupport.DATABASE} user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {BOUNCER_PORT}
unix_socket_dir =
auth_type = trust
auth_file = {userlist}
admin_users = postgres
pool_mode = transaction
default_pool_size = 2
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 100
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = {directory}/pgbouncer.log
pidfile = {directory}/pgbouncer.pid
""")
    for path in (directory, userlist, ini):
        os.chown(path, postgres.pw_uid, postgres.pw_gid)
    os.chmod(directory, 0o755)

    cmd = [PGBOUNCER, ini]
    if os.geteuid() != postgres.pw_uid:
        cmd = ["sudo", "-n", "-u", "postgres", "--"] + cmd
    out = open(os.path.join(directory, "stdout.log"), "w")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    bouncer = Bouncer(BOUNCER_PORT, directory, proc)
    try:
        deadline = time.monotonic() + 15
        while True:
            if proc.poll() is not None:
                pytest.fail(f"pgbouncer exited with {proc.returncode}:\n{bouncer.log()}")
            try:
                with bouncer.connect("advlock-test/bouncer-probe") as c:
                    c.execute("SELECT 1")
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    pytest.fail(f"pgbouncer did not accept connections on {BOUNCER_PORT}:\n{bouncer.log()}")
                time.sleep(0.1)
        yield bouncer
    finally:
        if proc.poll() is None:
            proc.terminate()  # sudo relays SIGTERM to pgbouncer
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        # Belt and braces: pgbouncer writes its pid file as postgres.
        try:
            with open(os.path.join(directory, "pgbouncer.pid")) as f:
                pid = int(f.read().strip())
            with open(f"/proc/{pid}/comm") as f:
                still_running = f.read().strip() == "pgbouncer"
        except (OSError, ValueError):
            still_running = False
        if still_running:
            os.kill(pid, 15)
        out.close()
