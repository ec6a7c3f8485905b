"""The Grafana dashboard monitoring/grafana/advlock.json, end to end: a real postgres_exporter
(Debian's 0.11.1) with the shipped queries.yaml, scraped every second by a real Prometheus server
(Debian's, loopback only, temporary config and storage, the shipped alert rules loaded), while a
fixture holds locks: a session lock left idle (leaked past the exporter role's 2 s
advlock.idle_threshold), a transaction lock idle in its transaction, a waiter behind it, a wait
that timed out, a stream of acquisitions and, preloaded, leases (held, renewed, released, expired,
a wait for one timed out). Every panel's every query, with the dashboard's variables given
concrete values ($__rate_interval = 1m), goes through Prometheus's /api/v1/query and must return
a finite value. A panel whose description says it needs shared_preload_libraries must return
data preloaded and none (or only NaN) without: both runs of scripts/test.sh assert every panel.

ADVLOCK_DASHBOARD_PNG=<path> (relative: to the repository): also draw the panels from range queries over the run (the fixture
then runs longer and ends by clearing the leak), as monitoring/grafana/advlock.png was made.
"""
import datetime
import importlib.util
import math
import os
import re
import subprocess
import threading
import time

import pytest

from monsupport import (DATABASE, IDLE_THRESHOLD_S, MONITORING, PROMTOOL_BIN, REPO, RULES_DIR,
                        WORKDIR, Prometheus, connect, exported_series, wait_until)

_spec = importlib.util.spec_from_file_location("advlock_dashboard_render", MONITORING / "grafana" / "render.py")
render = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(render)

SCRAPE = 1.0            # seconds between Prometheus's scrapes
HANG = 60.0             # hang protection only
RATE_INTERVAL = "1m"    # $__rate_interval: the whole fixture lies inside it
# A relative path is the repository's (pg_test/run.sh runs pytest in pg_test/monitoring).
PNG = os.environ.get("ADVLOCK_DASHBOARD_PNG") and str(REPO / os.environ["ADVLOCK_DASHBOARD_PNG"])


def dashboard_targets():
    """[(panel, target)] of every data panel."""
    return [(p, t) for p in render.panels(render.load()) for t in p.get("targets", [])]


def preloaded_only(panel) -> bool:
    return render.PRELOADED_ONLY in panel.get("description", "")


# ------------------------------------------------------------------------------ the JSON itself

def test_dashboard_schema_basics():
    """What Grafana needs to import the file, and what keeps it honest: uid, title, an integer
    schemaVersion, unique panel ids, a gridPos inside the 24-column grid without overlaps, the
    datasource as the ${DS_PROMETHEUS} variable, targets with an expr and unique refIds, and
    only series that queries.yaml makes the exporter print."""
    d = render.load()
    assert isinstance(d.get("uid"), str) and 0 < len(d["uid"]) <= 40, d.get("uid")
    assert isinstance(d.get("title"), str) and d["title"]
    assert isinstance(d.get("schemaVersion"), int) and d["schemaVersion"] >= 36, d.get("schemaVersion")
    assert "id" not in d or d["id"] is None, "an exported dashboard carries no database id"
    variables = {v["name"]: v for v in d["templating"]["list"]}
    ds = variables.get("DS_PROMETHEUS")
    assert ds and ds["type"] == "datasource" and ds["query"] == "prometheus", ds
    # Grafana's import prompt asks for a data source only for what __inputs declares (the
    # variable alone serves a provisioned dashboard); __requires names every plugin used.
    inputs = {i["name"]: i for i in d.get("__inputs", [])}
    assert inputs.get("DS_PROMETHEUS", {}).get("type") == "datasource", d.get("__inputs")
    assert inputs["DS_PROMETHEUS"]["pluginId"] == "prometheus", inputs
    required = {(r["type"], r["id"]) for r in d.get("__requires", [])}
    used = {("panel", p["type"]) for p in d["panels"] if p["type"] != "row"}
    assert {("grafana", "grafana"), ("datasource", "prometheus")} | used <= required, required
    for name, v in variables.items():
        if v["type"] == "query":
            assert v["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, name

    ids = [p["id"] for p in d["panels"]]
    assert all(isinstance(i, int) for i in ids) and len(ids) == len(set(ids)), ids
    cells = {}
    for p in d["panels"]:
        gp = p.get("gridPos")
        assert gp and all(isinstance(gp.get(k), int) for k in "hwxy"), (p["title"], gp)
        assert gp["w"] > 0 and gp["h"] > 0 and gp["x"] >= 0 and gp["x"] + gp["w"] <= 24, (p["title"], gp)
        for x in range(gp["x"], gp["x"] + gp["w"]):
            for y in range(gp["y"], gp["y"] + gp["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]
        if p["type"] == "row":
            assert not p.get("targets"), p["title"]
            continue
        assert p["type"] in ("timeseries", "stat"), p["type"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, p["title"]
        assert p.get("description"), f"{p['title']}: say what the panel shows"
        targets = p.get("targets") or []
        assert targets, f"{p['title']}: no targets"
        assert len({t["refId"] for t in targets}) == len(targets), p["title"]
        for t in targets:
            assert t.get("expr", "").strip(), (p["title"], t)
            assert t.get("datasource", p["datasource"]) == p["datasource"], (p["title"], t)

    # Every variable an expr uses is the dashboard's own, or one Grafana fills in.
    builtin = {"__rate_interval", "__interval", "__range"}
    for p, t in dashboard_targets():
        for m in re.finditer(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", t["expr"]):
            assert m.group(1) in variables or m.group(1) in builtin, f"{p['title']}: ${m.group(1)} is not defined"

    emitted = set(exported_series())
    used = set()
    for p, t in dashboard_targets():
        for name in set(re.findall(r"\b(advlock_[a-z0-9_]+)\b", t["expr"])):
            assert name in emitted, f"{p['title']}: {name} is not a series of queries.yaml"
            used.add(name)
    assert used, "no advlock series used"


def test_every_query_parses():
    """promtool checks each expr (variables substituted) as a recording rule: a syntax error is
    found here, before the end-to-end run."""
    rules = WORKDIR / "dashboard-exprs.rules.yml"
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for p, t in dashboard_targets():
        expr = render.substitute(t["expr"], {"server": "db:5432", "datname": "app", "__rate_interval": RATE_INTERVAL})
        lines += [f"      - record: panel_{p['id']}_{t['refId']}", f"        expr: '{expr}'"]
    rules.write_text("\n".join(lines) + "\n")
    r = subprocess.run([PROMTOOL_BIN, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(dashboard_targets())} rules found" in r.stdout, r.stdout


# ------------------------------------------------------------------------------ end to end

@pytest.fixture(scope="module")
def prometheus(exporter):
    prom = Prometheus("dashboard", [f"127.0.0.1:{exporter.port}"], interval=SCRAPE,
                      rule_files=[RULES_DIR / "advlock-rules.yml"]).start()
    try:
        wait_until(lambda: prom.query(f'advlock_holders{{datname="{DATABASE}"}}'), HANG, 0.2,
                   "Prometheus's first scrape of the exporter")
        yield prom
    except BaseException:
        print(prom.log_tail())
        raise
    finally:
        prom.stop()


def scrapes(prom, n=2):
    """Returns after n more scrapes of the exporter have been stored."""
    def last():
        got = prom.query('timestamp(up{job="postgres"})')
        return got[0][1] if got else 0
    first = last()
    wait_until(lambda: last() >= first + n * SCRAPE - 0.01, HANG, 0.1, f"{n} more scrapes")


@pytest.fixture(scope="module")
def held(prometheus, admin, preloaded, roles):
    """The locks the dashboard must show; released (and the leak cleared) at the end."""
    conns, stop, threads = [], threading.Event(), []

    def conn(app):
        c = connect(f"dashboard-{app}")
        conns.append(c)
        return c

    def try_lock(c, ns, key, timeout_ms, **kw):
        extra = "".join(f", {k} => '{v}'" for k, v in kw.items())
        return c.execute(f"SELECT advlock_try_with_timeout('{ns}', '{key}', {timeout_ms}{extra})").fetchone()[0]

    xact, got, lease_ids = None, {}, []
    started = time.time()
    try:
        # Preloaded, a namespace's counters exist once it has been used: one lock taken and
        # released in each, then a scrape, so that every increase below is seen by rate().
        warm = conn("warm-up")
        for ns in ("dash_leak", "dash_jobs", "dash_ticks"):
            assert try_lock(warm, ns, "warm-up", 0)
        if preloaded:
            wait_until(lambda: prometheus.query(f'advlock_waits_total{{datname="{DATABASE}", ns="dash_jobs"}}'),
                       HANG, 0.2, "the dash_jobs counters in Prometheus")
        scrapes(prometheus, 2)
        started = time.time()

        idle = conn("idle-holder")               # a session lock left behind, as a pool does
        assert try_lock(idle, "dash_leak", "nightly", 0, scope="session")
        xact = conn("xact-holder")               # a transaction lock, idle in its transaction
        xact.execute("BEGIN")
        assert try_lock(xact, "dash_jobs", "run", 0)
        impatient = conn("timeout")
        assert try_lock(impatient, "dash_jobs", "run", 300) is False   # waits 0.3 s, gives up
        waiter = conn("waiter")
        threads.append(threading.Thread(
            target=lambda: got.update(waiter=try_lock(waiter, "dash_jobs", "run", 60000)), daemon=True))
        ticker = conn("ticker")

        def tick():                              # a steady stream of immediate acquisitions
            while not stop.wait(0.2):
                try_lock(ticker, "dash_ticks", "tick", 0)
        threads.append(threading.Thread(target=tick, daemon=True))
        for t in threads:
            t.start()

        leases = conn("leases")
        if preloaded:
            lease_ids.append(leases.execute("SELECT advlock_lease('dash_lease', 'held', 60000, 0)").fetchone()[0])
            assert lease_ids[-1] is not None
            assert leases.execute("SELECT advlock_lease_renew(%s, 60000)", (lease_ids[0],)).fetchone()[0] is True
            # a lease left to expire: counted when the key is next asked for
            assert leases.execute("SELECT advlock_lease('dash_lease', 'expiring', 50, 0)").fetchone()[0] is not None
            leases.execute("SELECT pg_sleep(0.1)")
            lease_ids.append(leases.execute("SELECT advlock_lease('dash_lease', 'expiring', 60000, 0)").fetchone()[0])
            assert lease_ids[-1] is not None
            # a wait for the held one that runs out, and a lease released
            assert leases.execute("SELECT advlock_lease('dash_lease', 'held', 60000, 100)").fetchone()[0] is None
            short = leases.execute("SELECT advlock_lease('dash_lease', 'released', 60000, 0)").fetchone()[0]
            assert leases.execute("SELECT advlock_lease_release(%s)", (short,)).fetchone()[0] is True

        def visible():
            def total(expr):
                return sum(v for _, v in prometheus.query(expr) if not math.isnan(v))
            sel = f'datname="{DATABASE}"'
            return (total(f"advlock_leaked_holders{{{sel}}}") >= 1 and total(f"advlock_waiters{{{sel}}}") >= 1
                    and total(f"advlock_idle_in_transaction_holders{{{sel}}}") >= 1
                    and (not preloaded or total("advlock_lease_held") >= 2))
        wait_until(visible, HANG, 0.2, "the leak, the waiter and the leases in Prometheus")
        scrapes(prometheus, 2)
        if PNG:                                  # a longer story for the picture
            end = time.monotonic() + 12
            while time.monotonic() < end:
                try_lock(impatient, "dash_jobs", "run", 500)
                time.sleep(1.5)
        yield {"started": started}
    finally:
        stop.set()
        if xact is not None:
            xact.execute("COMMIT")               # the waiter gets the lock
        for t in threads:
            t.join(HANG)
        # The leak cleared as a person would (the idle holder's backend is terminated).
        admin.execute("SELECT count(*) FROM advlock_terminate_idle_holders('1 second', dry_run => false)")
        for lease in lease_ids:
            admin.execute("SELECT advlock_lease_release(%s)", (lease,))
        for c in conns:
            c.close()
    if threads:
        assert got.get("waiter") is True, got
    if PNG:
        draw(prometheus, started, admin, preloaded)


def test_every_panel_query_returns_data(prometheus, held, preloaded, exporter):
    server = prometheus.query(f'advlock_holders{{datname="{DATABASE}"}}')[0][0]["server"]
    values = {"server": server, "datname": DATABASE, "ns": ".*", "__rate_interval": RATE_INTERVAL}
    now = time.time()
    empty, checked, checked_preloaded = [], 0, 0
    results = {}
    for p, t in dashboard_targets():
        expr = render.substitute(t["expr"], values)
        got = prometheus.query(expr, at=now)
        finite = [v for _, v in got if not math.isnan(v) and not math.isinf(v)]
        results[(p["title"], t["refId"])] = got
        if preloaded_only(p) and not preloaded:
            # Honest marking: without preload such a panel has nothing to show.
            assert not finite, f"{p['title']} [{t['refId']}] is marked preloaded-only but returns {got}"
        elif not finite:
            empty.append(f"{p['title']} [{t['refId']}]: {expr} -> {got}")
        checked += 1
        checked_preloaded += preloaded_only(p)
    assert not empty, "panels without data while the fixture holds locks:\n" + "\n".join(empty)
    n_pre = sum(preloaded_only(p) for p, _ in dashboard_targets())
    assert checked == len(dashboard_targets()) and checked_preloaded == n_pre > 0, (checked, checked_preloaded)
    print(f"dashboard: {checked} queries checked, {n_pre} of them preloaded-only "
          f"({'with data' if preloaded else 'empty, as marked'})")

    # What the fixture holds, as the panels show it.
    def total(title, ref="A"):
        return sum(v for _, v in results[(title, ref)] if not math.isnan(v))
    assert total("Leaked holders") >= 1
    assert total("Waiting, per namespace") >= 1
    assert total("Holders by state, per namespace", "B") >= 1      # leaked
    assert total("Holders by state, per namespace", "C") >= 1      # idle in transaction
    assert total("Idle holders") >= 1
    assert max(v for _, v in results[("Longest idle holder", "A")]) >= IDLE_THRESHOLD_S
    assert max(v for _, v in results[("Oldest wait", "A")]) > 0
    assert 0 < total("Shared lock table in use", "B") <= total("Shared lock table in use", "A") < 1
    if preloaded:
        assert total("Leases held and waiting") >= 2
        for ref in "ABCDE":                      # granted, released, renewed, expired, timed out
            assert total("Lease events", ref) > 0, ref
        assert total("Average wait") > 0
        assert total("Waits and timeouts, per namespace", "B") > 0


def test_variables_list_the_fixture(prometheus, held, preloaded):
    """The dashboard's query variables (label_values(selector, label)), run as Grafana runs them,
    through /api/v1/label/<label>/values?match[]=selector, list this server, this database and,
    preloaded, the fixture's namespaces."""
    variables = {v["name"]: v for v in render.load()["templating"]["list"] if v["type"] == "query"}
    server = prometheus.query(f'advlock_holders{{datname="{DATABASE}"}}')[0][0]["server"]
    values = {"server": server, "datname": DATABASE, "ns": ".*"}
    expected = {"server": {server}, "datname": {DATABASE},
                "ns": {"dash_leak", "dash_jobs", "dash_ticks"} if preloaded else set()}
    assert set(variables) == set(expected), variables
    for name, v in variables.items():
        m = re.fullmatch(r"label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)", v["query"]["query"])
        assert m and v["definition"] == v["query"]["query"], v
        selector, label = render.substitute(m.group(1), values), m.group(2)
        listed = set(prometheus.api(f"label/{label}/values", **{"match[]": selector}))
        assert expected[name] <= listed, (name, selector, listed)
        if name != "ns" or preloaded:
            assert listed, (name, selector)


def test_shipped_rules_evaluate_on_real_series(prometheus, held):
    """The alert rules, loaded by the same Prometheus, evaluate without an error on the real
    series (a wrong label or a type mismatch shows here, not in the unit tests' synthetic data)."""
    scrapes(prometheus, 2)
    groups = prometheus.api("rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) == (RULES_DIR / "advlock-rules.yml").read_text().count("- alert: "), rules
    for r in rules:
        assert r["health"] == "ok" and not r.get("lastError"), (r["name"], r.get("lastError"))


def draw(prom, started, admin, preloaded):
    scrapes(prom, 6)
    end = time.time()
    server = prom.query(f'advlock_holders{{datname="{DATABASE}"}}')[0][0]["server"]
    values = {"server": server, "datname": DATABASE, "ns": ".*", "__rate_interval": "10s"}
    dash = render.load()
    data = render.fetch(prom.url, dash, values, started - 3, end, SCRAPE)
    pg = admin.execute("SELECT split_part(current_setting('server_version'), ' ', 1)").fetchone()[0]
    ext = admin.execute("SELECT extversion FROM pg_extension WHERE extname = 'advlock'").fetchone()[0]
    render.render(dash, data, PNG, f"{dash['title']} (monitoring/grafana/advlock.json), every panel from real queries",
                  f"PostgreSQL {pg}, advlock {ext} {'preloaded' if preloaded else 'not preloaded'}; postgres_exporter "
                  f"0.11.1 scraped every {SCRAPE:g} s by Prometheus 2.42; $__rate_interval = 10s.\n"
                  f"x axes: seconds since the fixture began; series at 0 all along are not drawn. Drawn by pg_test/monitoring/test_dashboard.py, {datetime.date.today().isoformat()}", started)
