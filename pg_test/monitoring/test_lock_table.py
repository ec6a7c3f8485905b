"""End to end, the lock table's headroom: a real postgres_exporter with the shipped queries.yaml
scrapes advlock_lock_table; one session fills the shared lock table with advisory locks past
both thresholds of the shipped rules (read from advlock-rules.yml, as is the fill level aimed
at); the scraped series rise by exactly the locks taken, and the expressions of
AdvlockAdvisoryLocksFillLockTable and AdvlockLockTableNearlyFull, evaluated by promtool on the
scraped samples, are true while the locks are held and false once they are released (their
`for:` durations are the unit tests' business, advlock-rules.test.yml).

A second exporter with two DSNs, this database and another of the server, shows the whole table
(and, preloaded, the lease table) once per DSN under connected_datname: no two series alike
(postgres_exporter answers HTTP 500 then), and the alerts count the table once, not once per DSN.
"""
import json
import math
import re
import subprocess

import psycopg
import pytest

from monsupport import (DATABASE, EXPORTER_ROLE, HOST, PORT, PROMTOOL_BIN, RULES_DIR, WORKDIR,
                        Exporter, wait_until)

RULES = RULES_DIR / "advlock-rules.yml"
ADVISORY_ALERT = "AdvlockAdvisoryLocksFillLockTable"
FULL_ALERT = "AdvlockLockTableNearlyFull"
METRICS = {f"advlock_lock_table_{c}": "gauge" for c in ("lock_entries", "advisory_entries", "capacity")}
OTHER_DB = f"{DATABASE}_other"
POLL = 0.25
HANG = 60.0
# As Prometheus labels the scrape (the exporter's own labels come with the samples).
JOB = "postgres"


def alert_expr(name: str) -> str:
    """The expr of alert `name` in the shipped rules file (a `|` block or one line)."""
    lines = RULES.read_text().splitlines()
    start = lines.index(f"      - alert: {name}")
    key = lines[start + 1]
    m = re.match(r"^(\s+)expr: ?(.*)$", key)
    assert m, f"{name}: expr must follow the alert line, found {key!r}"
    indent, rest = len(m.group(1)), m.group(2).strip()
    if rest not in ("|", ">-", "|-", ">"):
        return rest
    body = []
    for line in lines[start + 2:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        body.append(line.strip())
    return " ".join(b for b in body if b)


def threshold(expr: str) -> float:
    """The fraction of the capacity an alert fires above: the expressions end in "> 0.N"."""
    m = re.search(r">\s*([0-9]*\.?[0-9]+)\s*$", expr)
    assert m, f"no trailing threshold in {expr!r}"
    return float(m.group(1))


def lock_table(s, connected=DATABASE):
    """{datname: (lock_entries, advisory_entries, capacity)} of one DSN's rows of a scrape."""
    rows = {}
    for labels, value in s.series("advlock_lock_table_lock_entries", connected_datname=connected):
        d = labels["datname"]
        rows[d] = (value, s.value("advlock_lock_table_advisory_entries", connected_datname=connected, datname=d),
                   s.value("advlock_lock_table_capacity", connected_datname=connected, datname=d))
    return rows


def quote(v: str) -> str:
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


def selector(name, labels) -> str:
    return name + "{" + ",".join(f"{k}={quote(v)}" for k, v in sorted(labels.items())) + "}"


def promtool_eval(scrape, instance, cases, tag):
    """Evaluates each (expr, expected) with promtool on the lock-table samples of `scrape`, as
    Prometheus would have stored them (job and instance added): expected is the one result
    (labels, value), or None for no result. A promql_expr_test needs no Prometheus server."""
    series = [{"series": selector(name, {**labels, "job": JOB, "instance": instance}), "values": repr(value)}
              for name, labels, value in scrape.samples if name in METRICS]
    tests = [{"expr": expr, "eval_time": "0m",
              "exp_samples": [] if expected is None else
              [{"labels": selector("", expected[0]), "value": expected[1]}]}
             for expr, expected in cases]
    path = WORKDIR / f"lock-table-{tag}.test.yml"
    # JSON is YAML: the values keep every digit (repr), as promtool compares them exactly.
    path.write_text(json.dumps({"rule_files": [str(RULES)], "evaluation_interval": "1m",
                                "tests": [{"interval": "1m", "input_series": series,
                                           "promql_expr_test": tests}]}, indent=1))
    r = subprocess.run([PROMTOOL_BIN, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{path}:\n{r.stdout}{r.stderr}"


@pytest.fixture(scope="module")
def other_db(admin, roles):
    """A second database of the server with the extension, for the exporter's second DSN."""
    admin.execute(f"DROP DATABASE IF EXISTS {OTHER_DB} WITH (FORCE)")
    admin.execute(f"CREATE DATABASE {OTHER_DB}")
    with psycopg.connect(host=HOST, port=PORT, dbname=OTHER_DB, user="postgres", autocommit=True) as c:
        c.execute("CREATE EXTENSION advlock")
    yield OTHER_DB
    admin.execute(f"DROP DATABASE IF EXISTS {OTHER_DB} WITH (FORCE)")


@pytest.fixture(scope="module")
def two_dsn_exporter(other_db, metrics_view):
    """The second exporter of monitoring/README.md: advlock only, one DSN per database."""
    exp = Exporter(EXPORTER_ROLE, "two-dsns", databases=(DATABASE, other_db),
                   args=["--disable-default-metrics", "--disable-settings-metrics",
                         "--no-collector.database"]).start()
    yield exp
    exp.stop()


def view_rows(admin):
    return {d or "": (e, a, c) for d, e, a, c in admin.execute(
        "SELECT datname, lock_entries, advisory_entries, capacity FROM advlock_lock_table").fetchall()}


def test_series_names_labels_and_capacity(exporter, admin, metrics_view):
    s = exporter.scrape()
    assert s.value("pg_exporter_last_scrape_error") == 0, exporter.log_tail()
    for name, kind in METRICS.items():
        assert s.types.get(name) == kind, f"{name}: # TYPE {s.types.get(name)}, expected {kind}"
        for labels, value in s.series(name):
            assert set(labels) == {"connected_datname", "datname", "server"}, labels
            assert labels["connected_datname"] == DATABASE, labels
            assert value >= 0 and not math.isnan(value), (name, labels, value)
    rows = lock_table(s)
    assert DATABASE in rows, rows                  # the connected database always has a row
    capacity = view_rows(admin)[DATABASE][2]
    mlpt = int(admin.execute("SHOW max_locks_per_transaction").fetchone()[0])
    assert capacity > 0 and capacity % mlpt == 0, (capacity, mlpt)
    assert {c for _, _, c in rows.values()} == {capacity}, rows
    for d, (entries, advisory, _) in rows.items():
        assert advisory <= entries, (d, rows)
        assert d != "" or advisory == 0, rows     # an advisory lock always has a database


def test_two_dsns_of_one_server_do_not_collide(two_dsn_exporter, admin, other_db, preloaded):
    s = two_dsn_exporter.scrape()                  # HTTP 500 on a duplicate series
    assert s.value("pg_exporter_last_scrape_error") == 0, two_dsn_exporter.log_tail()
    # The lease table is the server's too (preloaded only), reported once per DSN.
    leases = sorted(labels["connected_datname"] for labels, _ in s.series("advlock_lease_capacity"))
    assert leases == (sorted([DATABASE, other_db]) if preloaded else []), leases
    for name in METRICS:
        keys = [(labels["connected_datname"], labels["datname"]) for labels, _ in s.series(name)]
        assert len(keys) == len(set(keys)), keys
        assert {c for c, _ in keys} == {DATABASE, other_db}, keys
    # Each DSN sees the whole table: its own database and the other one's.
    here, there = lock_table(s, DATABASE), lock_table(s, other_db)
    assert DATABASE in here and other_db in there, (here, there)
    assert {c for _, _, c in here.values()} == {c for _, _, c in there.values()}


def test_filling_the_lock_table_raises_both_alert_conditions(exporter, two_dsn_exporter, admin, other_db):
    advisory_expr, full_expr = alert_expr(ADVISORY_ALERT), alert_expr(FULL_ALERT)
    advisory_at, full_at = threshold(advisory_expr), threshold(full_expr)
    assert 0 < advisory_at < full_at < 1, (advisory_at, full_at)
    before = view_rows(admin)
    capacity = before[DATABASE][2]
    used = sum(e for e, _, _ in before.values())
    # A quarter of the way from the higher threshold to full (85 % for 80 %), all advisory.
    n = math.ceil((full_at + (1 - full_at) / 4) * capacity) - used
    assert n > advisory_at * capacity, (n, capacity, before)
    s0 = exporter.scrape()
    adv0 = lock_table(s0)[DATABASE][1]

    def expectations(s, instance, connected):
        """What both alert expressions must return for this scrape: one result, the fraction of
        the capacity one DSN's rows add up to, with the labels they have in common."""
        rows = lock_table(s, connected)
        common = {k: v for k, v in s.series("advlock_lock_table_capacity", connected_datname=connected)[0][0].items()
                  if k not in ("datname", "connected_datname")}
        common.update(job=JOB, instance=instance)
        return (rows, common,
                sum(a for _, a, _ in rows.values()) / capacity, sum(e for e, _, _ in rows.values()) / capacity)

    filler = psycopg.connect(host=HOST, port=PORT, dbname=DATABASE, user="postgres",
                             application_name="lock-table-filler", autocommit=True)
    try:
        # One statement: n session locks of keys nobody else in the suite uses.
        got = filler.execute("SELECT count(*) FILTER (WHERE pg_try_advisory_lock(-7, g)) "
                             "FROM generate_series(1, %s::int) g", (n,)).fetchone()[0]
        assert got == n
        s = wait_until(lambda: (lambda s: s if lock_table(s)[DATABASE][1] >= adv0 + n else None)(exporter.scrape()),
                       HANG, POLL, f"advlock_lock_table_advisory_entries{{datname={DATABASE!r}}} to rise by {n}")
        instance = f"127.0.0.1:{exporter.port}"
        rows, common, advisory, full = expectations(s, instance, DATABASE)
        assert rows[DATABASE][1] == adv0 + n, rows     # exactly the locks taken
        assert rows[DATABASE][0] >= rows[DATABASE][1], rows
        assert advisory > advisory_at and full > full_at, (advisory, full, rows)
        promtool_eval(s, instance, [(advisory_expr, (common, advisory)), (full_expr, (common, full))], "filled")

        # The exporter with two DSNs: the same locks in each DSN's copy, the table counted once.
        s2 = wait_until(lambda: (lambda s: s if all(lock_table(s, c)[DATABASE][1] >= adv0 + n
                                                    for c in (DATABASE, other_db)) else None)(two_dsn_exporter.scrape()),
                        HANG, POLL, "both DSNs of the two-DSN exporter to show the locks")
        assert lock_table(s2, DATABASE)[DATABASE][1] == lock_table(s2, other_db)[DATABASE][1] == adv0 + n
        instance2 = f"127.0.0.1:{two_dsn_exporter.port}"
        per_dsn = [expectations(s2, instance2, c) for c in (DATABASE, other_db)]
        assert per_dsn[0][1] == per_dsn[1][1], per_dsn   # the same server: the same labels left
        # The DSNs' rows are read a moment apart: the alert reports the larger of the two.
        cases = [(expr, (per_dsn[0][1], max(e[pick] for e in per_dsn)))
                 for expr, pick in ((advisory_expr, 2), (full_expr, 3))]
        promtool_eval(s2, instance2, cases, "filled-two-dsns")
    finally:
        filler.close()                                 # the session locks go with the session

    s = wait_until(lambda: (lambda s: s if lock_table(s)[DATABASE][1] <= adv0 else None)(exporter.scrape()),
                   HANG, POLL, "the advisory entries back to where they were")
    rows = lock_table(s)
    assert rows[DATABASE][1] == adv0, rows
    assert sum(e for e, _, _ in rows.values()) < full_at * capacity, rows
    promtool_eval(s, f"127.0.0.1:{exporter.port}", [(advisory_expr, None), (full_expr, None)], "released")


def test_the_view_still_answers_when_the_table_is_full(admin):
    """docs/lock-table.md, "When it is full": one session takes session locks until 53200; from
    a session opened before, advlock_lock_table still answers (its names come from the catalog
    cache, it locks no catalog), counting more entries than the capacity (the table grows into
    spare shared memory before it fails). Everything is released with the filling session."""
    watcher = psycopg.connect(host=HOST, port=PORT, dbname=DATABASE, user="postgres",
                              application_name="lock-table-watcher", autocommit=True)
    filler = psycopg.connect(host=HOST, port=PORT, dbname=DATABASE, user="postgres",
                             application_name="lock-table-full", autocommit=True)
    try:
        before = watcher.execute("SELECT advisory_entries, capacity FROM advlock_lock_table "
                                 "WHERE datname = current_database()").fetchone()
        # One statement that takes session locks until the table refuses: the error ends it,
        # the session locks it took stay (a session lock survives its statement's error).
        with pytest.raises(psycopg.errors.OutOfMemory):
            filler.execute("SELECT count(pg_advisory_lock(-8, g)) FROM generate_series(1, %s::int) g",
                           (before[1] * 4,))
        taken = filler.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                               "AND pid = pg_backend_pid()").fetchone()[0]
        assert taken > 0
        advisory, capacity = watcher.execute("SELECT advisory_entries, capacity FROM advlock_lock_table "
                                             "WHERE datname = current_database()").fetchone()
        assert advisory == before[0] + taken, (advisory, before, taken)
        assert advisory > capacity, (advisory, capacity)
    finally:
        filler.close()
        watcher.close()
    wait_until(lambda: admin.execute("SELECT advisory_entries FROM advlock_lock_table "
                                     "WHERE datname = current_database()").fetchone()[0] <= before[0],
               HANG, POLL, "the filling session's locks to go")
