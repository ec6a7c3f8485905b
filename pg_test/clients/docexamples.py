"""The examples of README.md and docs/, extracted as written, and a runner for SQL sessions.

Every fenced example block (```sql, ```python, ```js, ```go, ```java) of README.md and
docs/**/*.md is claimed in CLAIMS by the test that runs it (a marker: a line that only that
block contains); test_doc_examples.py::test_inventory fails for a block nobody runs, a marker
that matches no block or several, and a claim naming a test that does not exist. Blocks that
are not examples (signatures, sample output, configuration) are fenced as ```text or bare.

The SQL runner executes a block statement by statement on a real connection, as psql would
(autocommit; BEGIN/COMMIT in the block are statements), with every value as PostgreSQL's text.
A comment right after a statement's `;` is checked when it states a value:

    SELECT advlock_key('account', 42);  -- 7700915891107303510
    SELECT mode, granted FROM ...;      -- exclusive | t           (the first row, columns joined by " | ")
    SELECT advlock_lock_with_timeout(...);  -- ERROR 55P03: ...    (must raise that SQLSTATE)

(the value is the comment up to the first ": "; `true`/`false` mean t/f; a comment with spaces
and no " | " is prose and not checked). Any other error, and any WARNING, fails the block.
Blocks whose first line is "-- Session N..." run on connection N, each session in its own thread,
in document order: the next block starts when the previous one has finished, or, when its first
line says it "waits", as soon as its session is waiting for a lock. So examples of two or three
sessions run with real concurrent connections.
"""
import queue
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg.types.string import TextLoader

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOC_FILES = [README] + sorted((REPO / "docs").rglob("*.md"))
EXAMPLE_LANGS = {"sql", "python", "js", "go", "java"}

# marker -> the runner ("file::test" in pg_test/, or another script) of the one block holding it.
CLAIMS = {
    # README: Getting started (two sessions)
    "-- Session 1: take a lock for one transaction, and look at it": "clients/test_doc_examples.py::test_getting_started",
    "-- Session 2, while session 1 is still in its transaction": "clients/test_doc_examples.py::test_getting_started",
    "-- Session 1: COMMIT releases the transaction's locks": "clients/test_doc_examples.py::test_getting_started",
    "-- Session 2, after session 1's COMMIT": "clients/test_doc_examples.py::test_getting_started",
    # README: Install, reference, settings, upgrading, security (one session each)
    "CREATE EXTENSION IF NOT EXISTS advlock SCHEMA public;": "clients/test_doc_examples.py::test_single_session_examples",
    "CREATE TEMP TABLE jobs": "clients/test_doc_examples.py::test_single_session_examples",
    "SELECT advlock_try_with_timeout('migrate', '', 0, scope => 'session');": "clients/test_doc_examples.py::test_single_session_examples",
    "FROM advlock_holders ORDER BY key, granted DESC;": "clients/test_doc_examples.py::test_single_session_examples",
    "SELECT advlock_idle_threshold();": "clients/test_doc_examples.py::test_single_session_examples",
    "SHOW advlock.idle_threshold;": "clients/test_doc_examples.py::test_single_session_examples",
    "ALTER EXTENSION advlock UPDATE;": "clients/test_doc_examples.py::test_single_session_examples",
    "FROM pg_available_extension_versions WHERE name = 'advlock';": "clients/test_doc_examples.py::test_single_session_examples",
    "CREATE ROLE monitoring LOGIN;": "clients/test_doc_examples.py::test_monitoring_role_example",
    # README: run with a holder in another session, or in psql (\gset)
    "-- Readers share": "clients/test_readme_snippets.py::test_acquisition_examples_run_as_written",
    "-- Move money between accounts 42 and 17": "clients/test_readme_snippets.py::test_key_set_examples_run_as_written",
    "CREATE TABLE fenced_resource": "clients/test_readme_snippets.py::test_fenced_write_example_runs_as_written",
    "SELECT advlock_holding('leader', 'rollup', 'shared');": "clients/test_readme_snippets.py::test_holding_example_runs_as_written",
    "SELECT advlock_leak_count();          -- 0": "clients/test_readme_snippets.py::test_metrics_example_runs_as_written",
    "CALL advlock_wait_lock(advlock_key('migrate', 'schema'), 30000);": "clients/test_doc_examples.py::test_single_session_examples",
    "-- How full is the shared lock table (every database)": "clients/test_doc_examples.py::test_single_session_examples",
    # docs/lock-table.md
    "-- How full is the lock table, and how much of it is advisory?": "clients/test_doc_examples.py::test_single_session_examples",
    "-- Each advisory lock is one entry of the lock table": "clients/test_doc_examples.py::test_single_session_examples",
    "AS formula_holds": "clients/test_doc_examples.py::test_single_session_examples",
    # docs/failed-statement.md
    "CREATE FUNCTION fail_if_holding(k bigint)": "clients/test_doc_examples.py::test_single_session_examples",
    # README: Monitoring walkthrough (three sessions)
    "-- Session 1, the worker that forgets to unlock": "clients/test_doc_examples.py::test_who_holds_this_lock_walkthrough",
    "-- Session 2, the API: waits (up to 10 s) for the lock": "clients/test_doc_examples.py::test_who_holds_this_lock_walkthrough",
    "-- Session 3, the operator: who holds it, and who waits?": "clients/test_doc_examples.py::test_who_holds_this_lock_walkthrough",
    "-- Session 3, the operator: list the leaks, then terminate them": "clients/test_doc_examples.py::test_who_holds_this_lock_walkthrough",
    # README: applications
    "Python, psycopg 3": "clients/test_readme_snippets.py::test_psycopg_snippet",
    "async with conn.transaction():": "clients/test_readme_snippets.py::test_asyncpg_snippet",
    "await client.query('BEGIN');": "clients/test_readme_snippets.py::test_node_postgres_snippet",
    "tx, _ := pool.Begin(ctx)": "clients/test_readme_snippets.py::test_go_pgx_snippet",
    "conn.setAutoCommit(false);": "clients/test_readme_snippets.py::test_jdbc_snippet",
    "from advlock_key import advlock_key": "clients/test_doc_examples.py::test_python_key_snippet",
    "def unlock_all(conn):": "clients/test_pools.py::test_psycopg_pool_reset_from_readme_keeps_pooling",
    # README's lease example and docs/leases.md (preloaded, in psql for \gset)
    "SELECT advlock_lease('rollup', 'nightly', 30000, 5000) AS lease \\gset": "leases/test_doc_examples.py::test_lease_doc_examples",
    "CREATE TABLE report_output": "leases/test_doc_examples.py::test_lease_doc_examples",
    "SELECT advlock_lease('reports', 'running', 60000, 0, slots => 3) AS slot \\gset": "leases/test_doc_examples.py::test_lease_doc_examples",
    "SELECT advlock_lease('leader', 'rollup', 15000, 0) AS term \\gset": "leases/test_doc_examples.py::test_lease_doc_examples",
    # docs/fences.md
    "CREATE TEMP TABLE invoices": "clients/test_doc_examples.py::test_single_session_examples",
    # docs/sql-edition.md
    'SET search_path = "$user", public, advlock;': "edition/readme.sh",
    # docs/preload.md (monitoring runs preloaded and not in the test command)
    "SELECT key, mode, label, scope, held_since FROM advlock_holders WHERE pid = pg_backend_pid();": "monitoring/test_doc_examples_preloaded.py::test_preload_doc_examples",
    "SELECT * FROM advlock_stats;": "monitoring/test_doc_examples_preloaded.py::test_preload_doc_examples",
    "SELECT * FROM advlock_stats_info;": "monitoring/test_doc_examples_preloaded.py::test_preload_doc_examples",
}


@dataclass
class Block:
    path: Path
    lang: str
    text: str
    line: int   # 1-based line of the opening fence
    label: str  # the paragraph line just before the fence, e.g. "Python, psycopg 3:"

    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


FENCE = re.compile(r"^```([\w-]*)[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def blocks(files=None, langs=EXAMPLE_LANGS):
    out = []
    for path in files or DOC_FILES:
        text = path.read_text()
        for m in FENCE.finditer(text):
            if m.group(1) in langs:
                before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
                out.append(Block(path, m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1, before))
    return out


def claimed_by(block: Block):
    return [m for m in CLAIMS if m in block.text or m == block.label.rstrip(":")]


def block_with(marker: str) -> Block:
    found = [b for b in blocks() if marker in claimed_by(b)]
    assert len(found) == 1, f"{len(found)} example blocks of README.md/docs/ hold {marker!r}"
    return found[0]


def section(path: Path, heading: str) -> str:
    """The text under the heading (any level) whose text is `heading`, up to the next heading
    of the same or a higher level."""
    text = path.read_text()
    m = list(re.finditer(rf"^(#+) {re.escape(heading)}[ \t]*$", text, re.M))
    assert len(m) == 1, f"{path.name} has {len(m)} headings {heading!r}"
    level = len(m[0].group(1))
    rest = text[m[0].end():]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return rest[:end.start()] if end else rest


# --- the SQL runner ---------------------------------------------------------------------------

@dataclass
class Statement:
    sql: str
    expect: str | None   # the value the docs state, or None
    line: int


def statements(block_text: str):
    out, buf, start, in_body = [], [], None, False
    for n, raw in enumerate(block_text.split("\n"), 1):
        code, _, comment = raw.partition("--")
        if not buf and not code.strip():
            continue   # a comment line or a blank line between statements
        if start is None:
            start = n
        buf.append(code.rstrip())
        # A $$-quoted body (a function or DO block) may hold semicolons of its own.
        in_body ^= code.count("$$") % 2 == 1
        if code.rstrip().endswith(";") and not in_body:
            out.append(Statement("\n".join(buf), expected_value(comment), start))
            buf, start = [], None
    assert not buf, f"unterminated statement in block: {buf}"
    return out


def expected_value(comment: str):
    c = comment.strip()
    if not c:
        return None
    value = c.split(": ", 1)[0].strip()
    if value.startswith("ERROR"):
        return value
    if " | " in value or " " not in value:
        return {"true": "t", "false": "f"}.get(value, value)
    return None   # prose


def text_everything(conn):
    """Every column as PostgreSQL's text output, as psql prints it."""
    for (oid,) in conn.execute("SELECT oid FROM pg_type").fetchall():
        conn.adapters.register_loader(oid, TextLoader)


@dataclass
class Outcome:
    statement: Statement
    rows: list = field(default_factory=list)
    error: psycopg.Error | None = None
    warnings: list = field(default_factory=list)


class Session(threading.Thread):
    """One connection running the blocks given to it, in order, in its own thread."""

    def __init__(self, name, conn):
        super().__init__(daemon=True, name=name)
        self.conn = conn
        self.conn.autocommit = True
        text_everything(self.conn)
        self.pid = self.conn.info.backend_pid
        self.notices = []
        # A notice's Diagnostic is only valid inside the handler: copy what is checked.
        self.conn.add_notice_handler(
            lambda d: self.notices.append((d.severity_nonlocalized or d.severity, d.message_primary)))
        self.todo = queue.Queue()
        self.outcomes = []
        self.busy = threading.Event()
        self.crash = None
        self.start()

    def submit(self, text):
        self.busy.set()
        self.todo.put(text)

    def run(self):
        while True:
            text = self.todo.get()
            if text is None:
                return
            try:
                for st in statements(text):
                    self.notices.clear()
                    out = Outcome(st)
                    try:
                        cur = self.conn.execute(st.sql)
                        out.rows = cur.fetchall() if cur.description else []
                    except psycopg.Error as e:
                        out.error = e
                    out.warnings = [m for sev, m in self.notices if sev == "WARNING"]
                    self.outcomes.append(out)
            except Exception as e:  # noqa: BLE001 - reported by check()
                self.crash = e
            finally:
                self.busy.clear()

    def close(self):
        self.todo.put(None)
        self.join(timeout=30)
        self.conn.close()


def render(row):
    return " | ".join("" if v is None else str(v) for v in row)


def check(outcomes, where):
    """Fails with every statement whose result differs from what the docs say."""
    problems = []
    for o in outcomes:
        st, exp = o.statement, o.statement.expect
        label = f"{where} (block line {st.line}): {st.sql.strip()!r}"
        if o.warnings and not (exp or "").startswith("WARNING"):
            problems.append(f"{label}: unexpected WARNING {o.warnings}")
        if exp and exp.startswith("ERROR"):
            state = exp[len("ERROR"):].strip()
            if o.error is None:
                problems.append(f"{label}: the docs say {exp}, it succeeded")
            elif state and o.error.sqlstate != state:
                problems.append(f"{label}: the docs say {exp}, it raised {o.error.sqlstate} {o.error}")
            continue
        if o.error is not None:
            problems.append(f"{label}: raised {o.error.sqlstate} {o.error}")
        elif exp is not None:
            if not o.rows:
                problems.append(f"{label}: the docs say {exp!r}, it returned no row")
            elif render(o.rows[0]) != exp:
                problems.append(f"{label}: the docs say {exp!r}, it printed {render(o.rows[0])!r}")
    assert not problems, "\n".join(problems)


def waiting(admin, pid) -> bool:
    return admin.execute("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted)",
                         (pid,)).fetchone()[0]


def run_sessions(block_list, connect, admin, timeout=30.0):
    """Runs blocks whose first line is "-- Session N ..." on session N (connect(N) opens it), in
    order; the next block starts once the previous one has finished, or, for a block whose
    first line says it "waits", once its session waits for a lock. Returns the sessions (still
    open: close them) after every block has finished."""
    sessions = {}
    for b in block_list:
        m = re.match(r"-- Session (\d+)", b.text)
        assert m, f"{b.where()}: a session block must start with '-- Session N'"
        n = int(m.group(1))
        if n not in sessions:
            sessions[n] = Session(f"session-{n}", connect(n))
        s = sessions[n]
        assert not s.busy.is_set(), f"{b.where()}: session {n} is still running its previous block"
        s.submit(b.text)
        deadline = time.monotonic() + timeout
        background = "waits" in b.text.split("\n", 1)[0]
        while s.busy.is_set() and not (background and waiting(admin, s.pid)):
            assert time.monotonic() < deadline, f"{b.where()}: session {n} neither finished nor waits"
            time.sleep(0.01)
    deadline = time.monotonic() + timeout
    for s in sessions.values():
        while s.busy.is_set():
            assert time.monotonic() < deadline, f"{s.name} did not finish"
            time.sleep(0.01)
        assert s.crash is None, f"{s.name}: {s.crash!r}"
    return sessions


def wait_idle(s: Session, where: str, timeout=30.0):
    deadline = time.monotonic() + timeout
    while s.busy.is_set():
        assert time.monotonic() < deadline, f"{where} did not finish"
        time.sleep(0.01)
    assert s.crash is None, f"{where}: {s.crash!r}"


def run_block(block: Block, connect):
    """A one-session block on a fresh connection; checked. Returns the outcomes."""
    s = Session("single", connect())
    try:
        s.submit(block.text)
        wait_idle(s, block.where())
        check(s.outcomes, block.where())
        return s.outcomes
    finally:
        s.close()
