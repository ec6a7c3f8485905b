"""The fenced-write pattern end to end, with a real client process whose lock is taken away.

Holder A (a separate Python process with its own psycopg connection) takes the lock with
advlock_try_with_token and gets token t1; it writes once while it holds the lock. An
administrator terminates A's backend (pg_terminate_backend) while A's process keeps running,
unaware, as after a long GC pause or a network partition. B, which found the lock busy while A
held it, now gets it with token t2 > t1 (A's session lock went with its backend), is told by
advlock_holding that it holds it, and writes. A wakes up and does its late write with t1 --
its connection is gone, so it reconnects and retries, as a pool or retry loop would -- and the
fence rejects it: 0 rows, the resource keeps B's value.

The statements are exactly the README's:
    SELECT advlock_try_with_token('report', 'daily', 1000) AS token
    UPDATE fenced_resource SET value = %(value)s, fence = %(token)s WHERE id = 1 AND fence < %(token)s
With advlock in shared_preload_libraries, advlock_holders shows each holder's token (t1 for A,
then t2 for B); without it, the column is NULL.
"""
import json
import queue
import subprocess
import sys
import threading
import time

import pytest

import pgsupport
from advlock_key import advlock_key
from pgsupport import psy, wait_until

ACQUIRE = "SELECT advlock_try_with_token('report', 'daily', 1000) AS token"
WRITE = "UPDATE fenced_resource SET value = %(value)s, fence = %(token)s WHERE id = 1 AND fence < %(token)s"
KEY = advlock_key("report", "daily")

# Holder A: one JSON line per step on stdout; waits for "go" on stdin before its late write.
HOLDER_A = r"""
import json, sys
import psycopg

ACQUIRE, WRITE, conninfo = sys.argv[1], sys.argv[2], sys.argv[3]

def say(**kw):
    print(json.dumps(kw), flush=True)

def write(conn, token):
    return conn.execute(WRITE, {"value": "A", "token": token}).rowcount

conn = psycopg.connect(conninfo, autocommit=True)
say(pid=conn.info.backend_pid)
token = conn.execute(ACQUIRE).fetchone()[0]
say(token=token)
say(rows=write(conn, token))
sys.stdin.readline()  # paused: meanwhile its backend is terminated and B takes over
try:
    say(rows=write(conn, token), reconnected=False)
except psycopg.OperationalError as e:
    # The connection is gone: reconnect and retry with the token it still believes in.
    conn = psycopg.connect(conninfo, autocommit=True)
    say(rows=write(conn, token), reconnected=True, error=str(e).strip().splitlines()[0])
"""


class HolderA:
    def __init__(self):
        conninfo = pgsupport.conninfo("advlock-test/fencing/A",
                                      options=f"-c statement_timeout={pgsupport.STATEMENT_TIMEOUT_MS}")
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER_A, ACQUIRE, WRITE, conninfo],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def next(self, timeout=20):
        line = self.lines.get(timeout=timeout)
        if line is None:
            self.proc.wait(5)
            raise AssertionError(f"holder A exited ({self.proc.returncode}): {self.proc.stderr.read()}")
        return json.loads(line)

    def resume(self):
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def fenced_resource():
    with psy("advlock-test/fencing/setup") as conn:
        conn.execute("DROP TABLE IF EXISTS fenced_resource")
        conn.execute("CREATE TABLE fenced_resource (id int PRIMARY KEY, value text, fence bigint NOT NULL DEFAULT 0)")
        conn.execute("INSERT INTO fenced_resource (id, value) VALUES (1, 'initial')")
    yield
    with psy("advlock-test/fencing/setup") as conn:
        conn.execute("DROP TABLE IF EXISTS fenced_resource")


def resource(conn):
    return conn.execute("SELECT value, fence FROM fenced_resource WHERE id = 1").fetchone()


def holder_tokens(admin):
    """(pid, token) of the granted holders of ('report', 'daily')."""
    return admin.execute("SELECT pid, token FROM advlock_holders WHERE key = %s AND granted ORDER BY pid",
                         (KEY,)).fetchall()


def test_fenced_write_rejects_the_late_holder(admin, measure, fenced_resource):
    preloaded = "advlock" in admin.execute("SHOW shared_preload_libraries").fetchone()[0]
    a = HolderA()
    b = psy("advlock-test/fencing/B")
    try:
        a_pid = a.next()["pid"]
        t1 = a.next()["token"]
        assert isinstance(t1, int) and t1 > 0
        assert a.next()["rows"] == 1  # A's write while it holds the lock goes through
        assert resource(admin) == ("A", t1)
        assert holder_tokens(admin) == [(a_pid, t1 if preloaded else None)]

        # B finds the lock busy: no token after its 1 s wait.
        t0 = time.monotonic()
        assert b.execute(ACQUIRE).fetchone()[0] is None
        assert time.monotonic() - t0 >= 1.0
        assert b.execute("SELECT advlock_holding('report', 'daily')").fetchone()[0] is False

        # An administrator terminates A's backend; A's process runs on, paused, unaware.
        assert admin.execute("SELECT pg_terminate_backend(%s)", (a_pid,)).fetchone()[0] is True
        wait_until(lambda: not admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                                             (a_pid,)).fetchone()[0], what="A's backend to exit")
        assert a.proc.poll() is None

        # B takes over with a larger token, knows it holds the lock, and writes.
        t2 = b.execute(ACQUIRE).fetchone()[0]
        assert t2 is not None and t2 > t1, (t1, t2)
        assert b.execute("SELECT advlock_holding('report', 'daily')").fetchone()[0] is True
        assert holder_tokens(admin) == [(b.info.backend_pid, t2 if preloaded else None)]
        assert b.execute(WRITE, {"value": "B", "token": t2}).rowcount == 1
        assert resource(admin) == ("B", t2)

        # A's late write with t1 (over a new connection) changes nothing.
        a.resume()
        late = a.next()
        assert late["reconnected"] is True, late  # its old connection was indeed gone
        assert late["rows"] == 0, late
        assert resource(admin) == ("B", t2)
        assert a.proc.wait(10) == 0
        measure("token t1 (A) / t2 (B)", f"{t1} / {t2}")
        measure("A's late write after reconnecting", f"0 rows ({late['error']})")

        assert b.execute("SELECT advlock_unlock('report', 'daily')").fetchone()[0] is True
    finally:
        a.close()
        b.close()
