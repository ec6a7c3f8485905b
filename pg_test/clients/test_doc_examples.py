"""The examples of README.md and docs/, run as written (see docexamples.py for the rules).

- the inventory: every example block is claimed by exactly one test, which exists;
- the getting-started and "who holds this lock?" walkthroughs, with two and three real
  concurrent sessions; the error the getting started shows, against the real one;
- every one-session SQL example of the README, the monitoring role, the Python key snippet;
- the reference: its table lists every function and view of the extension, and the column
  tables of advlock_holders (README), advlock_metrics (docs/reference.md) and advlock_lock_table
  (docs/lock-table.md) every column of those views;
- the README stays under 40 KB; the release's file names in README.md, docs/packaging.md and
  docs/install-apt.md, and the release docs/packaging.md describes, are Cargo.toml's version.
"""
import os
import re
import subprocess
import sys

import psycopg
import pytest

import docexamples as dx
import pgsupport
from pgsupport import conninfo, psy

PG_TEST = dx.REPO / "pg_test"


def test_inventory():
    problems = []
    for b in dx.blocks():
        claims = dx.claimed_by(b)
        if len(claims) != 1:
            problems.append(f"{b.where()} ({b.lang}) is claimed by {len(claims)} markers {claims}: "
                            f"add its marker to docexamples.CLAIMS (and run it), or fence it as ```text")
    for marker, runner in dx.CLAIMS.items():
        found = [b.where() for b in dx.blocks() if marker in dx.claimed_by(b)]
        if len(found) != 1:
            problems.append(f"marker {marker!r} matches {len(found)} blocks {found}")
        path, _, test = runner.partition("::")
        source = PG_TEST / path
        if not source.is_file():
            problems.append(f"{marker!r}: runner {path} does not exist")
        elif test and f"def {test}(" not in source.read_text():
            problems.append(f"{marker!r}: {path} has no test {test}")
    assert not problems, "\n".join(problems)


def blocks_of(test_name):
    wanted = [m for m, r in dx.CLAIMS.items() if r.endswith("::" + test_name)]
    return sorted({id(b): b for b in (dx.block_with(m) for m in wanted)}.values(), key=lambda b: (str(b.path), b.line))


@pytest.fixture
def scratch_db():
    """A new database without the extension (the getting started creates it)."""
    name = "readme_getting_started"
    with psy("advlock-test/docs-admin") as c:
        c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        c.execute(f"CREATE DATABASE {name}")
    yield name
    with psy("advlock-test/docs-admin") as c:
        c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def close_all(sessions):
    for s in sessions.values():
        s.close()


def test_getting_started(admin, scratch_db):
    blocks = blocks_of("test_getting_started")
    assert len(blocks) == 4, [b.where() for b in blocks]
    section = dx.section(dx.README, "Getting started")
    assert all(b.text in section for b in blocks), "the getting-started blocks moved out of its section"
    apps = {1: "psql", 2: "psql"}
    sessions = dx.run_sessions(
        blocks, lambda n: psycopg.connect(conninfo(apps[n], dbname=scratch_db)), admin)
    try:
        for s in sessions.values():
            dx.check(s.outcomes, f"Getting started, {s.name}")
        # The error shown under session 2 is the one session 2 got (PID: session 1's).
        shown = re.search(r"```text\n(ERROR:.*?)```", section, re.S).group(1)
        lines = dict(line.split(":  ", 1) for line in shown.strip().split("\n"))
        err = next(o.error for o in sessions[2].outcomes if o.error is not None)
        # "(waited N ms)" is measured: at least the timeout, a little more on a busy machine.
        waited = int(re.search(r"waited (\d+) ms", err.diag.message_primary).group(1))
        assert 200 <= waited < 1000, err.diag.message_primary
        assert re.sub(r"waited \d+ ms", "waited 200 ms", err.diag.message_primary) == lines["ERROR"]
        assert err.diag.message_detail == re.sub(r"PID \d+", f"PID {sessions[1].pid}", lines["DETAIL"])
        assert err.diag.message_hint == lines["HINT"]
    finally:
        close_all(sessions)


def test_who_holds_this_lock_walkthrough(admin):
    blocks = blocks_of("test_who_holds_this_lock_walkthrough")
    assert len(blocks) == 4, [b.where() for b in blocks]
    sessions = dx.run_sessions(blocks, lambda n: psycopg.connect(conninfo(f"advlock-test/docs-session-{n}")), admin)
    try:
        for s in sessions.values():
            dx.check(s.outcomes, f"walkthrough, {s.name}")
        worker, api, operator = sessions[1].pid, sessions[2].pid, sessions[3]
        holders = next(o.rows for o in operator.outcomes if "FROM advlock_holders" in o.statement.sql)
        assert holders == [
            (str(worker), "billing-worker", "exclusive", "t", "idle", "t", None),
            (str(api), "billing-api", "exclusive", "f", "active", "f", "{%d}" % worker),
        ], holders
        idle = next(o.rows for o in operator.outcomes if "advlock_idle_holders" in o.statement.sql)
        assert idle == [(str(worker), "billing-worker")]
        # The API got the lock once the worker was terminated, and committed.
        assert [o.error for o in sessions[2].outcomes] == [None] * 4
        assert sessions[2].outcomes[2].rows == [("",)]
        pgsupport.wait_until(lambda: admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                                                   (worker,)).fetchone()[0] == 0, what="the worker to be gone")
    finally:
        close_all(sessions)


@pytest.mark.parametrize("marker", [m for m, r in dx.CLAIMS.items() if r.endswith("::test_single_session_examples")])
def test_single_session_examples(marker):
    dx.run_block(dx.block_with(marker), lambda: psycopg.connect(conninfo("advlock-test/docs-example")))


def test_monitoring_role_example(admin):
    admin.execute("DROP ROLE IF EXISTS monitoring")
    try:
        dx.run_block(dx.block_with("CREATE ROLE monitoring LOGIN;"),
                     lambda: psycopg.connect(conninfo("advlock-test/docs-example")))
        assert admin.execute("SELECT pg_has_role('monitoring', 'pg_monitor', 'MEMBER')").fetchone()[0]
    finally:
        admin.execute("DROP ROLE IF EXISTS monitoring")


def test_python_key_snippet(tmp_path):
    """The key snippet, with only what the README says: docs/keys/advlock_key.py importable."""
    program = tmp_path / "key_snippet.py"
    program.write_text(
        "import psycopg\n"
        f"conn = psycopg.connect({conninfo('advlock-test/docs-key-snippet')!r})\n"
        "cur = conn.cursor()\n"
        + dx.block_with("from advlock_key import advlock_key").text +
        "print(cur.fetchone()[0])\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(dx.REPO / "docs" / "keys")
    out = subprocess.run([sys.executable, str(program)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def reference_names(heading, path=dx.README):
    """Backticked names in the first column of the table under `heading` in `path`."""
    names = []
    for line in dx.section(path, heading).splitlines():
        if line.startswith("| ") and not line.startswith("| ---"):
            names += re.findall(r"`([a-z_0-9]+)[ `]", line.split(" | ")[0] + " ")
    return names


def reference_objects():
    """advlock_* names in the README's reference table, and those CONTRIBUTING.md lists apart as
    internal."""
    table = {n for n in reference_names("Functions and views") if n.startswith("advlock_")}
    internal_text = dx.section(dx.REPO / "CONTRIBUTING.md", "Internal SQL objects (not an API)")
    return table, set(re.findall(r"`(advlock_[a-z_0-9]+)(?:\(\))?`", internal_text))


def test_reference_lists_every_function_and_view(admin):
    objects = {r[0] for r in admin.execute(
        "SELECT p.proname FROM pg_depend d JOIN pg_proc p ON p.oid = d.objid"
        " WHERE d.classid = 'pg_proc'::regclass AND d.deptype = 'e' AND p.proname LIKE 'advlock\\_%%'"
        "   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'advlock')"
        " UNION SELECT c.relname FROM pg_depend d JOIN pg_class c ON c.oid = d.objid"
        " WHERE d.classid = 'pg_class'::regclass AND d.deptype = 'e' AND c.relkind IN ('v', 'S')"
        "   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'advlock')").fetchall()}
    table, internal = reference_objects()
    assert objects - table - internal == set(), "objects of the extension missing from the reference"
    assert (table | internal) - objects == set(), "reference names that are not objects of the extension"
    # Internal feeds with the same name as a view are the functions: advlock_metrics() is listed
    # apart, the advlock_metrics view in the table.
    assert {"advlock_lock_entries", "advlock_labels", "advlock_tokens", "advlock_metrics"} <= internal


@pytest.mark.parametrize("view, path, heading", [
    ("advlock_holders", dx.README, "advlock_holders"),
    ("advlock_metrics", dx.REPO / "docs" / "reference.md", "advlock_metrics"),
    ("advlock_lock_table", dx.REPO / "docs" / "lock-table.md", "The view advlock_lock_table")],
    ids=["advlock_holders", "advlock_metrics", "advlock_lock_table"])
def test_column_table_lists_every_column(admin, view, path, heading):
    columns = [r[0] for r in admin.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 ORDER BY attnum",
        (view,)).fetchall()]
    documented = reference_names(heading, path)
    assert sorted(documented) == sorted(columns), (
        f"{path.name}'s {view} table: missing {set(columns) - set(documented)}, extra {set(documented) - set(columns)}")


def test_runner_fails_a_wrong_example():
    """The runner is not lenient: a wrong value, an unexpected error, a missing error and a
    WARNING each fail the block."""
    connect = lambda: psycopg.connect(conninfo("advlock-test/docs-runner"))  # noqa: E731
    for text in ("SELECT advlock_key('account', 42);  -- 42\n",
                 "SELECT 1/0;\n",
                 "SELECT 1;  -- ERROR 22012\n",
                 "SELECT advlock_try_with_timeout('account', 42, 0);  -- t\n"):   # xact scope outside a block: WARNING
        block = dx.Block(dx.README, "sql", text, 0, "")
        with pytest.raises(AssertionError):
            dx.run_block(block, connect)
    dx.run_block(dx.Block(dx.README, "sql", "SELECT advlock_key('account', 42);  -- 7700915891107303510\n"
                          "SELECT 1/0;  -- ERROR 22012: division by zero\n", 0, ""), connect)


def slug(heading):
    """GitHub's anchor for a heading."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def test_links_resolve():
    """Every relative link of README.md, CONTRIBUTING.md and docs/ names a file that exists,
    and every #anchor a heading of that file."""
    problems = []
    for path in dx.DOC_FILES + [dx.REPO / "CONTRIBUTING.md"]:
        text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                problems.append(f"{path.name}: {target}: no such file")
            elif anchor and dest.suffix == ".md":
                headings = re.findall(r"^#+ (.*)$", dest.read_text(), re.M)
                if anchor not in {slug(h) for h in headings}:
                    problems.append(f"{path.name}: {target}: no such heading")
    assert not problems, "\n".join(problems)


def test_readme_stays_under_40_kb():
    """The README is for users and stays short: details go to docs/, maintainers' material to
    CONTRIBUTING.md."""
    size = dx.README.stat().st_size
    assert size <= 40_000, f"README.md is {size} bytes, over 40 KB (40,000 bytes): move details to docs/"


def test_release_version_strings_are_the_current_version():
    """The package and tarball names the install docs show, and the release docs/packaging.md
    says it describes, are the version of Cargo.toml (older versions appear only as what an
    upgrade starts from, never in a file name)."""
    version = re.search(r'^version = "([^"]+)"', (dx.REPO / "Cargo.toml").read_text(), re.M).group(1)
    names = re.compile(r"advlock_(\d+\.\d+\.\d+)-1_amd64\.deb|advlock-(\d+\.\d+\.\d+)(?:-pg\d+-linux-x86_64|\.tar\.gz|-py3)")
    problems, seen = [], 0
    for path in (dx.README, dx.REPO / "docs" / "packaging.md", dx.REPO / "docs" / "install-apt.md"):
        for m in names.finditer(path.read_text()):
            seen += 1
            found = m.group(1) or m.group(2)
            if found != version:
                problems.append(f"{path.name}: {m.group(0)} names {found}, the version is {version}")
    assert seen >= 4, f"only {seen} release file names found: the check would prove nothing"
    packaging = (dx.REPO / "docs" / "packaging.md").read_text()
    current = re.search(r"^The current release is \*\*(\S+)\*\*", packaging, re.M)
    assert current, "docs/packaging.md does not say which release it describes ('The current release is **X**')"
    if current.group(1) != version:
        problems.append(f"docs/packaging.md describes {current.group(1)}, the version is {version}")
    assert not problems, "\n".join(problems)
