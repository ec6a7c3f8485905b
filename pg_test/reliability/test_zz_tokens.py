"""Fencing tokens never go back: across a clean restart, a crash (SIGKILL of the postmaster),
and the promotion of a streaming standby that missed the old primary's last WAL.

advlock_try_with_token returns (timeline << 47) | nextval(advlock_token_seq); the sequence is
WAL-logged 32 values ahead and advlock flushes that WAL before the token reaches the client.
Proven here, each time against every token handed out before the event:

* restart (pg_ctl restart -m fast): every later token is larger;
* crash: the last token before the SIGKILL of the postmaster comes from a call that wrote the
  sequence's WAL record, in a transaction left open (so no commit flushes it and nothing wakes
  the WAL writer): it must still be covered after crash recovery -- without advlock's own
  flush the record would die in wal_buffers and the sequence would hand out that value again
  (a plain sequence drawn after it in the same transaction shows it: figure);
* promotion: on a separate primary/standby pair (initdb'd here on PORT+20/PORT+21, so the
  suite's instance is untouched), the standby is stopped, the primary hands out more tokens
  (WAL the standby never receives), the primary stops immediately, and the standby is started
  and promoted. Its sequence is provably behind (its counter part is below the lost tokens'),
  yet every token it issues is larger than every token the old primary issued, lost ones
  included, because its timeline is higher.

Marked `crash`: conftest.py runs these after everything else (after test_zz_crash.py, file
order); each leaves the suite's instance up and accepting connections.
"""
import os
import shutil
import signal
import time

import psycopg
import pytest

from relsupport import PGBIN, PGDATA, PORT, WORKDIR, as_postgres, connect, figure, wait_until

COUNTER_BITS = 47
COUNTER_MASK = (1 << COUNTER_BITS) - 1
TOKEN = "SELECT advlock_try_with_token(%s::bigint, 0, 'xact')"


def timeline(token):
    return token >> COUNTER_BITS


def counter(token):
    return token & COUNTER_MASK


def take_tokens(conn, key, n):
    """n tokens (each an xact-scoped acquisition, released at the end of its statement),
    checked to increase strictly."""
    tokens = [conn.execute(TOKEN, (key,)).fetchone()[0] for _ in range(n)]
    assert None not in tokens, tokens
    assert all(a < b for a, b in zip(tokens, tokens[1:])), tokens
    return tokens


def pg_ctl(datadir, *args, log=None, check=True):
    cmd = [f"{PGBIN}/pg_ctl", "-D", datadir, "-w", "-t", "60"]
    if log:
        cmd += ["-l", log]
    return as_postgres(*cmd, *args, check=check)


def connect_when_back(app, port=None, dbname=None, timeout=90):
    def attempt():
        try:
            conn = connect(app, port=port, dbname=dbname)
            conn.execute("SELECT 1")
            return conn
        except psycopg.OperationalError:
            return None
    return wait_until(attempt, timeout=timeout, interval=0.2, what=f"the server on port {port or PORT} to accept connections")


def log_since(offset):
    with open(os.path.join(WORKDIR, "postgres.log"), errors="replace") as f:
        f.seek(offset)
        return f.read()


def log_size():
    return os.path.getsize(os.path.join(WORKDIR, "postgres.log"))


def needs_instance_files():
    if not (WORKDIR and PGDATA):
        pytest.skip("ADVLOCK_WORKDIR / ADVLOCK_PGDATA not set (run through pg_test/run.sh)")


def current_timeline(conn):
    return conn.execute("SELECT timeline_id FROM pg_control_checkpoint()").fetchone()[0]


@pytest.mark.crash
def test_tokens_increase_across_restart(key):
    needs_instance_files()
    with connect("rel-tokens-before-restart") as conn:
        before = take_tokens(conn, key, 40)
        assert timeline(before[0]) == current_timeline(conn)
    offset = log_size()
    pg_ctl(PGDATA, "-m", "fast", "restart", log=os.path.join(WORKDIR, "postgres.log"))
    after_conn = connect_when_back("rel-tokens-after-restart")
    try:
        assert "database system is shut down" in log_since(offset)
        after = take_tokens(after_conn, key, 40)
    finally:
        after_conn.close()
    figure(f"tokens across a restart: last before {before[-1]} (timeline {timeline(before[-1])}, counter "
           f"{counter(before[-1])}), first after {after[0]} (counter {counter(after[0])})")
    assert min(after) > max(before)


def _process_state(pid):
    """The one-letter state of a process (None when it no longer exists)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def _children(pid):
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                kids.append(int(entry))
    return kids


@pytest.mark.crash
def test_tokens_increase_across_postmaster_crash(key):
    needs_instance_files()
    # Draw tokens until one writes the sequence's WAL record (log_cnt: the values still covered
    # by the last record; 32 right after a call logged 32 values ahead), drawing that one in a
    # transaction that stays open.
    before = []
    open_conn = connect("rel-tokens-open-xact")
    # Control: a plain sequence, drawn last in the same open transaction. Its first nextval
    # WAL-logs 32 values ahead like the token's, but nothing flushes that record before the crash.
    open_conn.execute("DROP SEQUENCE IF EXISTS rel_tokens_control_seq")
    open_conn.execute("CREATE SEQUENCE rel_tokens_control_seq")
    for _ in range(100):
        open_conn.execute("BEGIN")
        before.append(open_conn.execute(TOKEN, (key,)).fetchone()[0])
        if open_conn.execute("SELECT log_cnt FROM advlock_token_seq").fetchone()[0] == 32:
            break
        open_conn.execute("COMMIT")
    else:
        pytest.fail("no token call wrote the sequence's WAL record in 100 tries")
    last = before[-1]
    assert all(a < b for a, b in zip(before, before[1:])), before
    control_before = open_conn.execute("SELECT nextval('rel_tokens_control_seq')").fetchone()[0]

    with open(os.path.join(PGDATA, "postmaster.pid")) as f:
        postmaster = int(f.readline())
    children = _children(postmaster)
    assert children, "the postmaster has no children?"
    offset = log_size()
    os.kill(postmaster, signal.SIGKILL)
    killed_at = time.monotonic()
    # The orphaned backends and auxiliary processes notice the postmaster's death and exit;
    # the shared memory block stays in use until they have. The postmaster's own PID must be
    # reaped too (PID 1 of this machine reaps orphans after a moment): while it exists, even as
    # a zombie, the new postmaster takes the lock file for a live one's.
    wait_until(lambda: all(_process_state(p) in (None, "Z") for p in children), timeout=60, interval=0.1,
               what="the orphaned backends to exit after the postmaster's SIGKILL")
    wait_until(lambda: _process_state(postmaster) is None, timeout=60, interval=0.1,
               what=f"the killed postmaster (PID {postmaster}) to be reaped")
    with pytest.raises(psycopg.OperationalError):
        open_conn.execute("SELECT 1")
    open_conn.close()
    for attempt in range(20):
        started = pg_ctl(PGDATA, "start", log=os.path.join(WORKDIR, "postgres.log"), check=False)
        if started.returncode == 0:
            break
        time.sleep(0.5)  # e.g. "pre-existing shared memory block is still in use"
    else:
        pytest.fail(f"pg_ctl start after the crash failed: {started.stdout}{started.stderr}\n{log_since(offset)[-2000:]}")
    after_conn = connect_when_back("rel-tokens-after-crash")
    try:
        figure(f"SIGKILL of the postmaster: server accepting connections again {time.monotonic() - killed_at:.1f} s later")
        log = log_since(offset)
        assert "database system was interrupted" in log or "was not properly shut down" in log, log[-2000:]
        assert "redo starts" in log or "redo done" in log, log[-2000:]
        after = take_tokens(after_conn, key, 40)
        control_after = after_conn.execute("SELECT nextval('rel_tokens_control_seq')").fetchone()[0]
        after_conn.execute("DROP SEQUENCE rel_tokens_control_seq")
    finally:
        after_conn.close()
    figure(f"postmaster crash, control: a plain sequence drawn after the token in the same open transaction gave "
           f"{control_before} before and {control_after} after the crash"
           + (" (went back: its unflushed WAL record was lost)" if control_after <= control_before else ""))
    figure(f"tokens across a postmaster crash: last before {last} (counter {counter(last)}, from an uncommitted "
           f"transaction), first after {after[0]} (counter {counter(after[0])})")
    assert min(after) > max(before)


# --- Promotion of a standby that missed WAL (a pair of instances of its own) ---------------------------

PAIR_PRIMARY_PORT = PORT + 20
PAIR_STANDBY_PORT = PORT + 21
PAIR_DB = "advlock_tokens"


@pytest.fixture
def pair():
    """A primary (initdb'd here) and an asynchronous streaming standby of it, on PORT+20 and
    PORT+21, advlock created in database advlock_tokens with the suite instance's preload
    setting; both stopped and removed at the end."""
    needs_instance_files()
    base = os.path.join(WORKDIR, "tokens-promotion")
    if os.path.exists(base):
        shutil.rmtree(base)
    as_postgres("mkdir", "-p", base)
    primary, standby = os.path.join(base, "primary"), os.path.join(base, "standby")
    logs = {primary: os.path.join(base, "primary.log"), standby: os.path.join(base, "standby.log")}
    with connect("rel-tokens-settings") as c:
        preload = c.execute("SHOW shared_preload_libraries").fetchone()[0]
    running = []
    try:
        as_postgres(f"{PGBIN}/initdb", "-D", primary, "-U", "postgres", "-A", "trust", "-E", "UTF8",
                    "--locale=C.UTF-8", "--no-sync")
        conf = (f"\nport = {PAIR_PRIMARY_PORT}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{base}'\n"
                f"fsync = off\nwal_level = replica\nshared_preload_libraries = '{preload}'\n"
                "log_line_prefix = '%m [%p] %q%a '\n")
        as_postgres("sh", "-c", f"cat >> '{primary}/postgresql.conf'", input=conf)
        pg_ctl(primary, "start", log=logs[primary])
        running.append(primary)
        as_postgres(f"{PGBIN}/psql", "-X", "-q", "-h", base, "-p", str(PAIR_PRIMARY_PORT), "-U", "postgres",
                    "-d", "postgres", "-c", f"CREATE DATABASE {PAIR_DB}", "-c", f"\\c {PAIR_DB}",
                    "-c", "CREATE EXTENSION advlock")
        as_postgres(f"{PGBIN}/pg_basebackup", "-h", base, "-p", str(PAIR_PRIMARY_PORT), "-U", "postgres",
                    "-D", standby, "-R", "-X", "stream", "-c", "fast")
        as_postgres("sh", "-c", f"cat >> '{standby}/postgresql.conf'",
                    input=f"\nport = {PAIR_STANDBY_PORT}\nhot_standby = on\n")
        pg_ctl(standby, "start", log=logs[standby])
        running.append(standby)
        yield dict(primary=primary, standby=standby, logs=logs)
    finally:
        for datadir in (standby, primary):
            if os.path.exists(os.path.join(datadir, "postmaster.pid")):
                pg_ctl(datadir, "-m", "immediate", "stop", check=False)
        shutil.rmtree(base, ignore_errors=True)


def _replay_lsn_reached(standby, lsn):
    return standby.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)).fetchone()[0]


@pytest.mark.crash
def test_tokens_increase_across_promotion_of_a_standby_that_missed_wal(pair, key):
    primary = connect("rel-tokens-primary", port=PAIR_PRIMARY_PORT, dbname=PAIR_DB)
    standby = connect_when_back("rel-tokens-standby", port=PAIR_STANDBY_PORT, dbname=PAIR_DB)
    try:
        assert standby.execute("SELECT pg_is_in_recovery()").fetchone()[0] is True
        # Tokens are refused on the hot standby (WAL-logged sequence).
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            standby.execute(TOKEN, (key,))

        # 1. Tokens the standby receives.
        replicated = take_tokens(primary, key, 50)
        lsn = primary.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
        wait_until(lambda: _replay_lsn_reached(standby, lsn), timeout=60, interval=0.1,
                   what="the standby to replay the first tokens")
        assert counter(standby.execute("SELECT last_value FROM advlock_token_seq").fetchone()[0]) >= \
            counter(replicated[-1])
        standby.close()

        # 2. The standby goes away; the primary goes on handing out tokens it will never see.
        pg_ctl(pair["standby"], "-m", "fast", "stop")
        lost = take_tokens(primary, key, 200)
        lost_lsn = primary.execute("SELECT pg_current_wal_flush_lsn()").fetchone()[0]
        old_timeline = timeline(lost[-1])
        primary.close()
        # 3. The primary dies (its last WAL is lost with it: asynchronous replication).
        pg_ctl(pair["primary"], "-m", "immediate", "stop")

        # 4. The standby comes back (its primary is gone) and is promoted.
        pg_ctl(pair["standby"], "start", log=pair["logs"][pair["standby"]])
        standby = connect_when_back("rel-tokens-standby-2", port=PAIR_STANDBY_PORT, dbname=PAIR_DB)
        assert standby.execute("SELECT pg_is_in_recovery()").fetchone()[0] is True
        assert standby.execute("SELECT pg_last_wal_replay_lsn() < %s::pg_lsn", (lost_lsn,)).fetchone()[0], \
            "the standby has the WAL it was meant to miss"
        behind = standby.execute("SELECT last_value FROM advlock_token_seq").fetchone()[0]
        assert behind < counter(lost[-1]), (behind, lost[-1])
        pg_ctl(pair["standby"], "promote")
        wait_until(lambda: standby.execute("SELECT NOT pg_is_in_recovery()").fetchone()[0], timeout=60,
                   what="the promotion")
        promoted = take_tokens(standby, key, 50)
    finally:
        primary.close()
        standby.close()

    figure(f"tokens across a promotion that lost WAL: old primary's last (lost) token {lost[-1]} "
           f"(timeline {old_timeline}, counter {counter(lost[-1])}); standby's sequence at {behind}; "
           f"first token after promotion {promoted[0]} (timeline {timeline(promoted[0])}, counter "
           f"{counter(promoted[0])})")
    # The new primary's counter restarted below tokens already handed out ...
    assert counter(promoted[0]) < counter(lost[-1])
    # ... yet its tokens are larger than every token of the old primary, the lost ones included.
    assert timeline(promoted[0]) > old_timeline
    assert min(promoted) > max(replicated + lost)
