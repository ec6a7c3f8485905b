"""Helpers for the monitoring suite: the instance, a real postgres_exporter, /metrics parsing.

The instance is described by ADVLOCK_PGHOST / ADVLOCK_PGPORT / ADVLOCK_PGDATABASE (set by
pg_test/run.sh); scratch files (the exporters' logs) go to ADVLOCK_WORKDIR.
"""
import json
import math
import os
import re
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import sys
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# The suites' shared helpers (wait_until re-exported for the tests).
from pgtestsupport import Server, wait_until  # noqa: E402,F401
import pgtestsupport  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
MONITORING = REPO / "monitoring"
QUERIES = MONITORING / "postgres_exporter" / "queries.yaml"
RULES_DIR = MONITORING / "prometheus"

STATEMENT_TIMEOUT_MS = 20000
PG = Server.from_env(5418, "advlock_monitoring", STATEMENT_TIMEOUT_MS)
HOST, PORT, DATABASE = PG.host, PG.port, PG.dbname
WORKDIR = Path(os.environ.get("ADVLOCK_WORKDIR") or tempfile.mkdtemp(prefix="advlock-monitoring."))

EXPORTER_BIN = os.environ.get("ADVLOCK_POSTGRES_EXPORTER", "/usr/bin/prometheus-postgres-exporter")
PROMETHEUS_BIN = os.environ.get("ADVLOCK_PROMETHEUS", "/usr/bin/prometheus")
PROMTOOL_BIN = os.environ.get("ADVLOCK_PROMTOOL", "promtool")

# Roles created by the suite (cluster-wide, in its throwaway instance).
EXPORTER_ROLE = "advlock_exporter"      # pg_monitor, advlock.idle_threshold = '2s'
BLIND_ROLE = "advlock_exporter_blind"   # no pg_monitor: the blind spot
IDLE_THRESHOLD_S = 2.0

# Every metric of queries.yaml: name -> Prometheus type.
EXPECTED_METRICS = {
    "advlock_holders": "gauge",
    "advlock_locks": "gauge",
    "advlock_leaked_holders": "gauge",
    "advlock_leaked_locks": "gauge",
    "advlock_idle_in_transaction_holders": "gauge",
    "advlock_hidden_holders": "gauge",
    "advlock_waiters": "gauge",
    "advlock_oldest_wait_seconds": "gauge",
    "advlock_oldest_hold_seconds": "gauge",
    "advlock_acquisitions_total": "counter",
    "advlock_immediate_total": "counter",
    "advlock_waits_total": "counter",
    "advlock_timeouts_total": "counter",
    "advlock_wait_seconds_total": "counter",
    "advlock_idle_terminations_total": "counter",
    "advlock_preloaded": "gauge",
}
COUNTERS = [m for m, t in EXPECTED_METRICS.items() if t == "counter"]



def conninfo(app: str, user: str = "postgres", **extra) -> str:
    return PG.conninfo(app, user=user, options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}", **extra)


def connect(app: str, user: str = "postgres") -> psycopg.Connection:
    return PG.connect(app, user=user)




# ---------------------------------------------------------------------------- /metrics parsing

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Scrape:
    """One /metrics page: samples as (name, labels dict, value), plus the # TYPE lines."""

    def __init__(self, text: str, at: float):
        self.text, self.at = text, at
        self.types, self.samples = {}, []
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(None, 3)
                self.types[name] = kind.strip()
            elif line and not line.startswith("#"):
                m = _SAMPLE.match(line)
                if m:
                    labels = {k: re.sub(r'\\(.)', lambda e: "\n" if e.group(1) == "n" else e.group(1), v)
                              for k, v in _LABEL.findall(m.group(2) or "")}
                    self.samples.append((m.group(1), labels, float(m.group(3))))

    def series(self, name: str, **labels) -> list:
        return [(lab, v) for n, lab, v in self.samples
                if n == name and all(lab.get(k) == val for k, val in labels.items())]

    def value(self, name: str, **labels):
        """The value of the one series of `name` matching labels; None when there is none."""
        found = self.series(name, **labels)
        assert len(found) <= 1, f"several series of {name} match {labels}: {found}"
        return found[0][1] if found else None

    def total(self, name: str, **labels) -> float:
        return sum(v for _, v in self.series(name, **labels) if not math.isnan(v))


# ---------------------------------------------------------------------------- the exporter

# ADVLOCK_MONITORING_PORTS=FIRST-LAST: the loopback ports the exporters and Prometheus may bind
# (several test runs on one machine each given their own range); by default any free port.
_PORTS = os.environ.get("ADVLOCK_MONITORING_PORTS", "")
_port_cursor = 0


def free_port() -> int:
    global _port_cursor
    if not _PORTS:
        return pgtestsupport.free_port()
    first, last = (int(p) for p in _PORTS.split("-"))
    for _ in range(last - first + 1):
        port = first + _port_cursor % (last - first + 1)
        _port_cursor += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise AssertionError(f"no free port in ADVLOCK_MONITORING_PORTS={_PORTS}")


class Exporter:
    """A real postgres_exporter on loopback, with the shipped queries.yaml, connecting as `role`
    to `databases` (one DSN each, comma separated as 0.11.1 takes several; default the suite's
    database), with `args` added to its command line."""

    def __init__(self, role: str, name: str, databases=(DATABASE,), args=()):
        self.role, self.name = role, name
        self.databases, self.args = list(databases), list(args)
        self.proc = None
        self.port = None
        self.log = WORKDIR / f"postgres_exporter-{name}.log"

    def start(self, timeout: float = 30.0):
        assert os.access(EXPORTER_BIN, os.X_OK), (
            f"{EXPORTER_BIN} is missing: scripts/setup.sh installs Debian's prometheus-postgres-exporter")
        for _attempt in range(3):   # the free port may be taken between the probe and the bind
            self.port = free_port()
            env = dict(os.environ)
            env["DATA_SOURCE_NAME"] = ",".join(
                f"postgresql://{self.role}@{HOST}:{PORT}/{db}"
                f"?sslmode=disable&application_name=postgres_exporter-{self.name}" for db in self.databases)
            args = [EXPORTER_BIN,
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    f"--extend.query-path={QUERIES}",
                    # 0.11.1's bgwriter collector reads columns PostgreSQL 17 moved (it logs an
                    # error every scrape); nothing of advlock's depends on it.
                    "--no-collector.bgwriter", *self.args]
            with open(self.log, "ab") as log:
                log.write(f"\n### {' '.join(args)}\n".encode())
                log.flush()
                self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    self.get("/")
                    return self
                except OSError:
                    time.sleep(0.1)
            self.stop()
        raise AssertionError(f"postgres_exporter did not start; log:\n{self.log_tail()}")

    def get(self, path: str, timeout: float = 15.0) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=timeout) as r:
            return r.read().decode()

    def scrape(self) -> Scrape:
        try:
            text = self.get("/metrics")
        except urllib.error.HTTPError as e:
            # The body says why, e.g. the same series collected twice.
            raise AssertionError(f"/metrics: HTTP {e.code}: {e.read().decode(errors='replace')[:3000]}") from e
        return Scrape(text, time.monotonic())

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


# ---------------------------------------------------------------------------- queries.yaml

def exported_series(path=QUERIES) -> dict:
    """Every series queries.yaml makes postgres_exporter print: {"<query>_<column>": usage}
    for each column that is not a LABEL (GAUGE, COUNTER, ...). A reader of this file's own
    layout (the test venv has no YAML library): top-level query names at column 0, their
    `metrics:` list items `- <column>:` with a `usage:` line."""
    series, query, column = {}, None, None
    for line in Path(path).read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = re.match(r"^([a-z_][a-z0-9_]*):\s*$", line)
        if m:
            query, column = m.group(1), None
            continue
        m = re.match(r"^\s+- ([a-z_][a-z0-9_]*):\s*$", line)
        if m and query:
            column = m.group(1)
            continue
        m = re.match(r"^\s+usage:\s*\"?([A-Z]+)\"?\s*$", line)
        if m and query and column:
            if m.group(1) != "LABEL":
                series[f"{query}_{column}"] = m.group(1).lower()
            column = None
    return series


# ---------------------------------------------------------------------------- Prometheus

class Prometheus:
    """A real Prometheus server (Debian's prometheus) on loopback, with a temporary config and
    storage directory, scraping `targets` every `interval` seconds (job "postgres"), with
    `rule_files` loaded; queried through its HTTP API."""

    def __init__(self, name: str, targets, interval: float = 1.0, rule_files=()):
        self.name, self.targets, self.interval = name, list(targets), interval
        self.rule_files = [str(p) for p in rule_files]
        self.dir = Path(tempfile.mkdtemp(prefix=f"prometheus-{name}.", dir=WORKDIR))
        self.log = WORKDIR / f"prometheus-{name}.log"
        self.proc = None
        self.port = None

    def start(self, timeout: float = 60.0):
        assert os.access(PROMETHEUS_BIN, os.X_OK), (
            f"{PROMETHEUS_BIN} is missing: scripts/setup.sh installs Debian's prometheus package")
        ms = int(self.interval * 1000)
        config = self.dir / "prometheus.yml"
        config.write_text(
            "global:\n"
            f"  scrape_interval: {ms}ms\n"
            f"  scrape_timeout: {ms}ms\n"
            f"  evaluation_interval: {ms}ms\n"
            + ("rule_files:\n" + "".join(f"  - {f}\n" for f in self.rule_files) if self.rule_files else "")
            + "scrape_configs:\n"
            "  - job_name: postgres\n"
            "    static_configs:\n"
            f"      - targets: [{', '.join(repr(t) for t in self.targets)}]\n")
        for _attempt in range(3):   # the free port may be taken between the probe and the bind
            self.port = free_port()
            args = [PROMETHEUS_BIN, f"--config.file={config}", f"--storage.tsdb.path={self.dir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1d"]
            with open(self.log, "ab") as log:
                log.write(f"\n### {' '.join(args)}\n".encode())
                log.flush()
                self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, cwd=self.dir)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    self.get("/-/ready")
                    return self
                except OSError:
                    time.sleep(0.2)
            self.stop()
        raise AssertionError(f"Prometheus did not start; log:\n{self.log_tail()}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, timeout: float = 15.0) -> str:
        with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
            return r.read().decode()

    def api(self, path: str, **params):
        """GET /api/v1/<path>; the `data` of a success, else an AssertionError naming the error."""
        url = f"/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            body = json.loads(self.get(url))
        except urllib.error.HTTPError as e:
            body = json.loads(e.read().decode() or "{}")
        assert body.get("status") == "success", f"{path} {params}: {body}"
        return body["data"]

    def query(self, expr: str, at: float = None) -> list:
        """An instant query: [(labels dict, value float)]."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("query", **params)
        assert data["resultType"] == "vector", data
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
