"""End to end: a real postgres_exporter (Debian's 0.11.1) with the shipped
monitoring/postgres_exporter/queries.yaml scrapes this cluster on loopback, started and stopped
by the tests. A psycopg_pool connection leaks a session lock; /metrics shows it as leaked (with
its namespace when advlock is preloaded) once idle past advlock.idle_threshold (2 s for the
exporter's role), and back at 0 after advlock_terminate_idle_holders.

ADVLOCK_MONITORING_SVG=<path>: also draw the scraped series of the leak test as an SVG chart
(monitoring/leak-detected.svg comes from such a run).
"""
import datetime
import math
import os
import threading
import time

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from monsupport import (BLIND_ROLE, COUNTERS, EXPECTED_METRICS, IDLE_THRESHOLD_S, conninfo,
                        connect, exported_series, wait_until)

NS = "reports"
POLL = 0.25          # seconds between scrapes
HANG = 60.0          # hang protection only: every wait normally ends within a few seconds


def ns_label(preloaded: bool) -> str:
    """The ns label of a lock taken as ('reports', ...): unknown ("") without preload."""
    return NS if preloaded else ""


def test_metric_names_and_types(exporter, preloaded, metrics_view):
    s = exporter.scrape()
    assert s.value("pg_up") == 1
    assert s.value("pg_exporter_last_scrape_error") == 0, exporter.log_tail()
    load_errors = s.series("pg_exporter_user_queries_load_error")
    assert load_errors and all(v == 0 for _, v in load_errors), load_errors
    for name, kind in EXPECTED_METRICS.items():
        assert s.types.get(name) == kind, f"{name}: # TYPE {s.types.get(name)}, expected {kind}"
        # The row of unknown namespaces is always there, so every gauge exists at 0.
        series = s.series(name, ns="")
        assert len(series) == 1, f"{name}: {series}"
        labels, value = series[0]
        assert set(labels) == {"datname", "ns", "server"}, labels
        assert labels["datname"] == os.environ.get("ADVLOCK_PGDATABASE", "advlock_monitoring")
    assert s.value("advlock_preloaded", ns="") == (1 if preloaded else 0)
    for name in COUNTERS:
        for labels, value in s.series(name):
            if preloaded:
                assert not math.isnan(value) and value >= 0, (name, labels, value)
            else:
                assert math.isnan(value), f"{name}{labels} = {value}: no counters without preload"
    hold = s.value("advlock_oldest_hold_seconds", ns="")
    assert (hold == 0) if preloaded else math.isnan(hold)
    assert s.value("advlock_oldest_wait_seconds", ns="") == 0


def test_every_series_of_queries_yaml_printed(exporter, admin, preloaded, metrics_view):
    """Every series the file defines (as test_series_list.py and the dashboard read it) is on
    /metrics with its type; the preloaded-only queries (advlock_lease, advlock_stats_info:
    gated, never raising) print nothing without preload, and no query fails."""
    assert admin.execute("SELECT advlock_try_with_timeout('reports', 'warm-up', 0)").fetchone()[0] is True
    s = exporter.scrape()
    assert s.value("pg_exporter_last_scrape_error") == 0, exporter.log_tail()
    preloaded_only = ("advlock_lease_", "advlock_stats_info_")
    series = exported_series()
    for name, kind in series.items():
        if name.startswith(preloaded_only) and not preloaded:
            assert s.series(name) == [] and name not in s.types, (name, s.series(name))
            continue
        assert s.types.get(name) == kind, f"{name}: # TYPE {s.types.get(name)}, expected {kind}"
        assert s.series(name), f"{name}: no sample"
    printed = {n for n, _, _ in s.samples if n.startswith("advlock_")}
    assert printed <= set(series), f"printed but not in queries.yaml: {printed - set(series)}"
    if preloaded:
        assert s.value("advlock_stats_info_max_labels") == 4096       # advlock.max_labels default
        assert s.value("advlock_stats_info_max_namespaces") == 256    # advlock.max_namespaces default
        assert s.value("advlock_stats_info_namespaces_in_use") >= 1   # "reports" at least
        for name in ("advlock_stats_info_labels_dropped_total", "advlock_stats_info_stats_dropped_total"):
            assert s.value(name) == 0, name
    assert s.value("advlock_idle_holders") == 0 and s.value("advlock_idle_oldest_seconds") == 0
    assert "advlock" not in "\n".join(line for line in exporter.log.read_text(errors="replace").splitlines()
                                      if "error" in line.lower()), exporter.log_tail()


def test_leak_detected_and_cleared(exporter, admin, preloaded, metrics_view):
    ns = ns_label(preloaded)
    samples = []          # (monotonic time, holders, leaked_holders) of ns, one per scrape
    marks = {}

    def sample():
        s = exporter.scrape()
        holders = s.value("advlock_holders", ns=ns)
        leaked = s.value("advlock_leaked_holders", ns=ns)
        assert holders is not None and leaked is not None, f"no ns={ns!r} series:\n{s.text}"
        samples.append((s.at, holders, leaked))
        return holders, leaked

    def scrape_until(condition, what):
        def probe():
            got = sample()
            if condition(*got):
                return True
            time.sleep(POLL)
            return False
        wait_until(probe, HANG, 0, what)
        return samples[-1][0]

    def scrape_for(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            sample()
            time.sleep(POLL)

    # Before the leak: nothing held in the namespace, the gauge exists at 0. (Preloaded, a
    # namespace has its row once advlock_stats counts it: one lock taken and released.)
    assert admin.execute("SELECT advlock_try_with_timeout('reports', 'warm-up', 0)").fetchone()[0] is True
    scrape_until(lambda h, leaked: h == 0 and leaked == 0, f"no holder in ns={ns!r} before the test")
    samples.clear()
    scrape_for(1.5)
    assert samples and all(h == 0 and leaked == 0 for _, h, leaked in samples), samples

    pool = ConnectionPool(conninfo("reports-worker"), min_size=1, max_size=1, open=True,
                          timeout=10, name="reports-pool")
    try:
        pool.wait(timeout=10)
        with pool.connection() as conn:
            pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            got = conn.execute(
                "SELECT advlock_try_with_timeout('reports', 'nightly', 0, scope => 'session')").fetchone()[0]
            assert got is True
            # ... and the block ends without advlock_unlock: the leak.
        marks["leak"] = time.monotonic()
        state = admin.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
        assert state == ("idle",), state   # back in the pool, outside any transaction

        marks["detected"] = scrape_until(lambda h, leaked: leaked == 1, f"advlock_leaked_holders{{ns={ns!r}}} 1")
        after_leak = [(t, h, leaked) for t, h, leaked in samples if t > marks["leak"]]
        # Held at once, but leaked only once idle past the role's advlock.idle_threshold.
        assert any(h == 1 and leaked == 0 for _, h, leaked in after_leak), after_leak
        assert marks["detected"] - marks["leak"] >= IDLE_THRESHOLD_S - 0.25, (marks, after_leak)
        scrape_for(2.0)
        assert samples[-1][1:] == (1, 1), samples[-1]

        marks["terminate"] = time.monotonic()
        rows = admin.execute(
            "SELECT pid, terminated FROM advlock_terminate_idle_holders('2 seconds', dry_run => false)").fetchall()
        assert (pid, True) in rows, rows
        marks["cleared"] = scrape_until(lambda h, leaked: h == 0 and leaked == 0,
                                        f"advlock_leaked_holders{{ns={ns!r}}} back to 0")
        scrape_for(1.5)
        assert samples[-1][1:] == (0, 0), samples[-1]
    finally:
        pool.close(timeout=5)

    svg = os.environ.get("ADVLOCK_MONITORING_SVG")
    if svg:
        draw(svg, samples, marks, ns, preloaded, admin, metrics_view)


def test_waiters_timeouts_and_idle_in_transaction(exporter, admin, preloaded, metrics_view):
    """The gauges and counters behind the waiting and timeout alerts, end to end."""
    ns = ns_label(preloaded)
    before = exporter.scrape()
    counters0 = {name: before.value(name, ns=ns) for name in COUNTERS}
    holder = connect("contention-holder")
    other = connect("contention-try")
    waiter = connect("contention-waiter")
    result = {}

    def wait_for_lock():
        result["got"] = waiter.execute(
            "SELECT advlock_try_with_timeout('reports', 'contended', 30000)").fetchone()[0]

    thread = threading.Thread(target=wait_for_lock)
    try:
        holder.execute("BEGIN")
        assert holder.execute("SELECT advlock_try_with_timeout('reports', 'contended', 0)").fetchone()[0] is True
        # holder is now idle in transaction, holding the xact lock
        assert other.execute("SELECT advlock_try_with_timeout('reports', 'contended', 0)").fetchone()[0] is False
        thread.start()

        def contended():
            s = exporter.scrape()
            return s if (s.value("advlock_waiters", ns=ns) == 1
                         and s.value("advlock_idle_in_transaction_holders", ns=ns) == 1
                         and s.value("advlock_oldest_wait_seconds", ns=ns) > 0) else None
        s = wait_until(contended, HANG, POLL, "one waiter and one idle-in-transaction holder on /metrics")
        assert s.value("advlock_holders", ns=ns) == 1
        assert s.value("advlock_locks", ns=ns) == 1
        assert s.value("advlock_leaked_holders", ns=ns) == 0    # in a transaction: not a leak
        hold = s.value("advlock_oldest_hold_seconds", ns=ns)
        assert (hold > 0) if preloaded else math.isnan(hold)
        holder.execute("COMMIT")
        thread.join(HANG)
        assert result.get("got") is True
    finally:
        for conn in (holder, other, waiter):
            conn.close()
        thread.join(HANG)

    after = wait_until(lambda: (lambda s: s if s.value("advlock_waiters", ns=ns) == 0
                                and s.value("advlock_holders", ns=ns) == 0 else None)(exporter.scrape()),
                       HANG, POLL, "no waiter and no holder after the commit")
    delta = {name: after.value(name, ns=ns) - counters0[name] for name in COUNTERS}
    if preloaded:
        assert delta["advlock_acquisitions_total"] == 2, delta   # the holder, then the waiter
        assert delta["advlock_immediate_total"] == 1, delta
        assert delta["advlock_waits_total"] == 1, delta
        assert delta["advlock_timeouts_total"] == 1, delta       # the try with timeout 0
        assert delta["advlock_wait_seconds_total"] > 0, delta
    else:
        assert all(math.isnan(v) for v in delta.values()), delta


def test_without_pg_monitor_the_holder_is_hidden(exporter, blind_exporter, admin, preloaded, metrics_view):
    """An exporter role without pg_monitor cannot see other roles' backends: their leak shows as
    advlock_hidden_holders (the blind spot AdvlockHiddenHolders alerts on), never as leaked."""
    ns = ns_label(preloaded)
    holder = connect("reports-holder")      # role postgres: not the blind role's own backend
    try:
        assert holder.execute(
            "SELECT advlock_try_with_timeout('reports', 'blind-spot', 0, scope => 'session')").fetchone()[0]
        wait_until(lambda: exporter.scrape().value("advlock_leaked_holders", ns=ns) == 1, HANG, POLL,
                   "the pg_monitor exporter to report the leak")
        s = blind_exporter.scrape()
        assert s.value("pg_exporter_last_scrape_error") == 0, blind_exporter.log_tail()
        assert s.total("advlock_holders") == 1, s.series("advlock_holders")
        assert s.total("advlock_hidden_holders") == 1, s.series("advlock_hidden_holders")
        assert s.total("advlock_leaked_holders") == 0, s.series("advlock_leaked_holders")

        with connect("blind-psql", user=BLIND_ROLE) as blind:
            hidden, leaked = blind.execute(
                "SELECT sum(hidden_holders), sum(leaked_holders) FROM advlock_metrics").fetchone()
            assert (hidden, leaked) == (1, 0)
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                blind.execute("SELECT advlock_leak_count()")
    finally:
        holder.close()
    wait_until(lambda: exporter.scrape().total("advlock_holders") == 0, HANG, POLL, "the holder gone")
    assert blind_exporter.scrape().total("advlock_hidden_holders") == 0


def draw(path, samples, marks, ns, preloaded, admin, extversion):
    from svgchart import step_chart
    t0 = samples[0][0]
    pg = admin.execute("SELECT split_part(current_setting('server_version'), ' ', 1)").fetchone()[0]
    label = f'{{ns="{ns}"}}'
    step_chart(
        path,
        title="A leaked advisory lock, detected and cleared (real postgres_exporter scrapes)",
        subtitles=[
            f"Debian's postgres_exporter 0.11.1 with monitoring/postgres_exporter/queries.yaml, scraped every {POLL} s",
            f"PostgreSQL {pg}, advlock {extversion} {'preloaded' if preloaded else 'not preloaded'}, "
            f"advlock.idle_threshold = {IDLE_THRESHOLD_S:g}s for the exporter's role",
            f"drawn by pg_test/monitoring/test_exporter.py from a real run, {datetime.date.today().isoformat()}"],
        series=[("advlock_holders" + label, "#4a7bd0", [(t - t0, h) for t, h, _ in samples]),
                ("advlock_leaked_holders" + label, "#d0392b", [(t - t0, leaked) for t, _, leaked in samples])],
        events=[(marks["leak"] - t0, "psycopg_pool connection returned holding a session lock"),
                (marks["leak"] + IDLE_THRESHOLD_S - t0, f"idle for advlock.idle_threshold ({IDLE_THRESHOLD_S:g} s)"),
                (marks["detected"] - t0, "first scrape with advlock_leaked_holders = 1"),
                (marks["terminate"] - t0, "advlock_terminate_idle_holders('2 seconds', dry_run => false)"),
                (marks["cleared"] - t0, "back to 0")],
        x_label="seconds since the first scrape")


def test_lease_series_preloaded_only_and_an_expiry_counted(exporter, admin, preloaded):
    """advlock_lease_* series exist only preloaded; a lease left to expire shows in
    advlock_lease_expired_total (what AdvlockLeasesExpiring alerts on)."""
    s = exporter.scrape()
    assert s.value("pg_exporter_last_scrape_error") == 0, exporter.log_tail()
    if not preloaded:
        assert s.series("advlock_lease_capacity") == []
        return
    assert s.value("advlock_lease_capacity") == 1024
    before = s.value("advlock_lease_expired_total")
    admin.execute("SELECT advlock_lease('monitoring', 'expiring', 50, 0)")
    admin.execute("SELECT pg_sleep(0.1)")
    # The expiry is counted when the key is next asked for (or the table is full).
    assert admin.execute("SELECT advlock_lease('monitoring', 'expiring', 1000, 0) IS NOT NULL").fetchone()[0]
    after = wait_until(lambda: (lambda s: s if s.value("advlock_lease_expired_total") >= before + 1
                                else None)(exporter.scrape()), 10, what="the expiry to be counted")
    assert after.value("advlock_lease_held") == 1
    admin.execute("SELECT advlock_lease_release(lease) FROM advlock_leases")
