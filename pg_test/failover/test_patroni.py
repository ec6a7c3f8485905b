"""A leader and its leases through a Patroni switchover and the loss of a node (issue #39): two
PostgreSQL nodes managed by Patroni 4.1 with its built-in Raft DCS and a Raft witness
(patroni_raft_controller), advlock preloaded, clients on a multi-host DSN
(target_session_attrs=read-write).

While `patronictl switchover` moves the primary, and then while the new primary's Patroni and
postmaster are killed (SIGKILL) and Patroni fails over to the other node after its ttl (20 s), a
holder renews a lease, an election term and both slots of a semaphore every second (TTL 8 s)
from whatever connection works, reconnecting after errors, and a contender campaigns for the
term's key every 200 ms. Checked after each change: the holder's renewals on the new primary
succeed with the same ids (never `false`), the contender never wins, `advlock_leader` names the
same term, the semaphore stays full, a token drawn afterwards is larger than every id before, and
the fence written with the term before the changes refuses a smaller token. Needs Patroni in a venv the postgres user can run: ADVLOCK_PATRONI_BIN
(default /opt/advlock-patroni/bin, made by scripts/setup.sh from requirements-patroni.txt).
"""
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.request

import psycopg
import pytest
from conftest import PGBIN, WORKDIR, as_postgres, wait_until

PATRONI_BIN = os.environ.get("ADVLOCK_PATRONI_BIN", "/opt/advlock-patroni/bin")
BASE = int(os.environ.get("ADVLOCK_PATRONI_PORT", "5540"))
# Raft: node1, node2, witness; REST API: node1, node2; PostgreSQL: node1, node2.
RAFT = [BASE, BASE + 1, BASE + 2]
REST = [BASE + 3, BASE + 4]
PG_PORTS = [BASE + 5, BASE + 6]
TTL_MS = 8000
LEASE_KEY, TERM_KEY, SEM_KEY, LATE_KEY = 9101, 9102, 9103, 9104
DSN = psycopg.conninfo.make_conninfo(
    host="127.0.0.1,127.0.0.1", port=f"{PG_PORTS[0]},{PG_PORTS[1]}", dbname="postgres", user="postgres",
    target_session_attrs="read-write", connect_timeout=2, options="-c statement_timeout=10000")

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(PATRONI_BIN, "patroni")),
                                reason=f"Patroni not installed in {PATRONI_BIN} (scripts/setup.sh installs it)")


def node_config(i, base):
    name = f"node{i + 1}"
    return {
        "scope": "advlock-failover", "name": name,
        "restapi": {"listen": f"127.0.0.1:{REST[i]}", "connect_address": f"127.0.0.1:{REST[i]}"},
        "raft": {"data_dir": os.path.join(base, f"raft-{name}"), "self_addr": f"127.0.0.1:{RAFT[i]}",
                 "bind_addr": f"127.0.0.1:{RAFT[i]}",
                 "partner_addrs": [f"127.0.0.1:{p}" for p in RAFT if p != RAFT[i]]},
        "bootstrap": {
            "dcs": {"ttl": 20, "loop_wait": 2, "retry_timeout": 5,
                    "postgresql": {"use_pg_rewind": True, "parameters": {
                        "shared_preload_libraries": "advlock", "wal_log_hints": "on",
                        "max_wal_senders": 10, "hot_standby": "on"}}},
            "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}],
        },
        "postgresql": {
            "listen": f"127.0.0.1:{PG_PORTS[i]}", "connect_address": f"127.0.0.1:{PG_PORTS[i]}",
            "data_dir": os.path.join(base, name), "bin_dir": PGBIN,
            "pgpass": os.path.join(base, f"pgpass-{name}"),
            "authentication": {"superuser": {"username": "postgres", "password": "postgres"},
                               "replication": {"username": "postgres", "password": "postgres"}},
            "pg_hba": ["local all all trust", "host all all 127.0.0.1/32 trust",
                       "host replication all 127.0.0.1/32 trust"],
            "parameters": {"unix_socket_directories": base},
        },
    }


def witness_config(base):
    return {"raft": {"data_dir": os.path.join(base, "raft-witness"), "self_addr": f"127.0.0.1:{RAFT[2]}",
                     "bind_addr": f"127.0.0.1:{RAFT[2]}",
                     "partner_addrs": [f"127.0.0.1:{RAFT[0]}", f"127.0.0.1:{RAFT[1]}"]}}


def cluster_state():
    """The members as Patroni's REST API reports them (any node that answers)."""
    for port in REST:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/cluster", timeout=2) as r:
                return json.load(r)["members"]
        except OSError:
            continue
    return []


def leader_and_streaming():
    members = cluster_state()
    leader = [m["name"] for m in members if m.get("role") == "leader" and m.get("state") == "running"]
    streaming = [m["name"] for m in members if m.get("role") in ("replica", "sync_standby")
                 and m.get("state") == "streaming"]
    return (leader[0], streaming[0]) if leader and streaming else None


@pytest.fixture
def patroni():
    if not WORKDIR:
        pytest.skip("ADVLOCK_WORKDIR not set (run through pg_test/run.sh failover)")
    base = os.path.join(WORKDIR, "patroni")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    shutil.chown(base, "postgres")
    os.chmod(base, 0o700)
    procs, logs = {}, []

    def spawn(name, argv, config):
        path = os.path.join(base, f"{name}.yml")
        with open(path, "w") as f:
            json.dump(config, f)              # JSON is YAML
        shutil.chown(path, "postgres")
        log = open(os.path.join(base, f"{name}.log"), "w")
        logs.append(log)
        procs[name] = subprocess.Popen(["sudo", "-u", "postgres", "--", *argv, path], stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        return path

    try:
        spawn("witness", [os.path.join(PATRONI_BIN, "patroni_raft_controller")], witness_config(base))
        configs = [spawn(f"node{i + 1}", [os.path.join(PATRONI_BIN, "patroni")], node_config(i, base))
                   for i in range(2)]
        wait_until(leader_and_streaming, timeout=180, interval=0.5, what="a Patroni leader and a streaming replica")
        yield base, configs, procs
    finally:
        for p in reversed(procs.values()):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(procs.values()):
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        for i in range(2):
            data = os.path.join(base, f"node{i + 1}")
            if os.path.exists(os.path.join(data, "postmaster.pid")):
                as_postgres(f"{PGBIN}/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop", check=False)
        for log in logs:
            log.close()


def connect():
    return psycopg.connect(DSN, autocommit=True)


def kill_node(base, procs, name):
    """Node loss: SIGKILL of the node's Patroni and of its postmaster (its backends follow)."""
    os.killpg(procs[name].pid, signal.SIGKILL)
    with open(os.path.join(base, name, "postmaster.pid")) as f:
        postmaster = f.readline().strip()
    as_postgres("kill", "-9", postmaster, check=False)


def test_a_switchover_and_a_node_loss_keep_the_leader_and_its_leases(patroni):
    base, configs, procs = patroni
    with connect() as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS advlock")
        one = lambda sql, *a: c.execute(sql, a).fetchone()[0]  # noqa: E731
        held = {
            "lease": one("SELECT advlock_lease(%s::bigint, %s, 0)", LEASE_KEY, TTL_MS),
            "term": one("SELECT advlock_campaign(%s::bigint, %s, 0, 'leader-1')", TERM_KEY, TTL_MS),
            "slot1": one("SELECT advlock_lease(%s::bigint, %s, 0, slots => 2)", SEM_KEY, TTL_MS),
            "slot2": one("SELECT advlock_lease(%s::bigint, %s, 0, slots => 2)", SEM_KEY, TTL_MS),
        }
        c.execute("SELECT advlock_fence('patroni', 'resource', %s)", (held["term"],))
    assert all(v is not None for v in held.values()), held

    stop = threading.Event()
    renewals, contender_wins, errors = [], [], []

    def holder():
        conn = None
        while not stop.wait(1.0):
            try:
                conn = conn if conn is not None and not conn.closed else connect()
                for name, lease in held.items():
                    ok, port = conn.execute("SELECT advlock_lease_renew(%s, %s), inet_server_port()",
                                            (lease, TTL_MS)).fetchone()
                    renewals.append((name, ok, port))
            except psycopg.Error as e:        # a change of primary: not yet renewed, reconnect
                errors.append(type(e).__name__)
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()

    def contender():
        conn = None
        while not stop.wait(0.2):
            try:
                conn = conn if conn is not None and not conn.closed else connect()
                term = conn.execute("SELECT advlock_campaign(%s::bigint, %s, 0, 'contender')",
                                    (TERM_KEY, TTL_MS)).fetchone()[0]
                if term is not None:
                    contender_wins.append(term)
            except psycopg.Error:
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()

    def check_new_primary(old_port, what):
        """Three rounds of renewals on a primary other than `old_port`, none refused; then the
        table there holds every lease and the term."""
        wait_until(lambda: sum(1 for r in renewals if r[2] != old_port and r[1]) >= 3 * len(held),
                   timeout=120, interval=0.2, what=f"renewals on the new primary after the {what}")
        refused = [r for r in renewals if not r[1]]
        assert refused == [], f"renewals that found the lease gone ({what}): {refused}"
        assert contender_wins == [], f"a contender won the term's key ({what}): {contender_wins}"
        with connect() as c:
            port = c.execute("SELECT inet_server_port()").fetchone()[0]
            assert port != old_port
            assert c.execute("SELECT term, candidate FROM advlock_leader(%s::bigint)",
                             (TERM_KEY,)).fetchone() == (held["term"], "leader-1")
            rows = dict(c.execute("SELECT lease, key FROM advlock_leases WHERE granted").fetchall())
            assert {k: rows.get(v) for k, v in held.items()} == {
                "lease": LEASE_KEY, "term": TERM_KEY, "slot1": SEM_KEY, "slot2": SEM_KEY}
            assert c.execute("SELECT advlock_lease(%s::bigint, 1000, 0, slots => 2)",
                             (SEM_KEY,)).fetchone()[0] is None
            fresh = c.execute("SELECT advlock_lease(%s::bigint, 1000, 0)", (LATE_KEY,)).fetchone()[0]
            assert fresh is not None and fresh > max(held.values())
            assert c.execute("SELECT advlock_lease_release(%s)", (fresh,)).fetchone()[0] is True
            with pytest.raises(psycopg.Error) as stale:
                c.execute("SELECT advlock_fence('patroni', 'resource', %s)", (held["term"] - 1,))
            assert stale.value.sqlstate == "LK001"
        return port

    threads = [threading.Thread(target=holder), threading.Thread(target=contender)]
    for t in threads:
        t.start()
    try:
        time.sleep(2)
        leader, candidate = leader_and_streaming()
        old_port = PG_PORTS[int(leader[-1]) - 1]
        r = as_postgres(os.path.join(PATRONI_BIN, "patronictl"), "-c", configs[0], "switchover",
                        "--leader", leader, "--candidate", candidate, "--force", check=False, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        wait_until(lambda: (leader_and_streaming() or ("", ""))[0] == candidate, timeout=120, interval=0.5,
                   what="the candidate to lead, the old leader streaming from it")
        port = check_new_primary(old_port, "switchover")
        # Node loss: the new leader's Patroni and postmaster die; the old one takes over after
        # Patroni's ttl (the Raft witness keeps a quorum).
        renewals.clear()
        kill_node(base, procs, candidate)
        check_new_primary(port, "node loss")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    with connect() as c:
        for lease in held.values():
            assert c.execute("SELECT advlock_lease_release(%s)", (lease,)).fetchone()[0] is True
