r"""Every driver snippet in the README's "Driver snippets" section, run as written, and the SQL
reference examples that need psql (\gset) or a holder in another session. The inventory of
every example of README.md and docs/ and who runs it is docexamples.CLAIMS
(test_doc_examples.py::test_inventory).

The snippets are extracted from README.md, not retyped: each runs with a real connection and a
`process_account` that records, from the snippet's own session, whether it holds the advisory
lock on advlock_key('account', 42) at that moment. Each must have held it while processing and
released it at COMMIT. A new snippet language without a runner here fails the inventory test.
"""
import asyncio
import json
import os
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

import docexamples
import pgsupport
from pgsupport import psy

HERE = Path(__file__).resolve().parent
README = HERE.parent.parent / "README.md"
JDBC_JAR = Path("/usr/share/java/postgresql.jar")   # Debian's libpostgresql-jdbc-java
NODE_MODULES = HERE / "js" / "node_modules"           # npm install by scripts/setup.sh

# What process_account checks, from the snippet's session: the lock it was given.
HELD_SQL = ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
            "AND granted AND ((classid::int8 << 32) | objid::int8) = advlock_key('account', 42)")


def driver_snippets():
    """(label, language, code) for each fenced block of the Driver snippets section."""
    section = docexamples.section(README, "Driver snippets")
    found = []
    for m in re.finditer(r"\n([^\n`]+):\n\n```(\w+)\n(.*?)\n```", section, re.S):
        found.append((m.group(1).strip(), m.group(2), m.group(3)))
    return found


def snippet(label):
    matches = [s for s in driver_snippets() if s[0] == label]
    assert len(matches) == 1, f"README has {len(matches)} snippets labelled {label!r}"
    return matches[0][2]


def lock_released(admin):
    return admin.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                         "AND ((classid::int8 << 32) | objid::int8) = advlock_key('account', 42)").fetchone()[0] == 0


@pytest.fixture
def admin():
    conn = psy("advlock-test/readme-admin")
    yield conn
    conn.close()


def test_inventory():
    labels = [s[0] for s in driver_snippets()]
    assert labels == ["Python, psycopg 3", "Python, asyncpg", "Node.js, node-postgres", "Go, pgx", "Java, JDBC"], labels


def test_psycopg_snippet(admin):
    conn = psy("advlock-test/readme-psycopg")
    seen = []

    def process_account(c, account_id):
        seen.append((account_id, c.execute(HELD_SQL).fetchone()[0]))

    try:
        exec(snippet("Python, psycopg 3"), {"conn": conn, "process_account": process_account})
    finally:
        conn.close()
    assert seen == [(42, 1)]
    assert lock_released(admin)


def test_asyncpg_snippet(admin):
    code = "async def run(conn, process_account):\n" + textwrap.indent(snippet("Python, asyncpg"), "    ")
    scope = {}
    exec(code, scope)
    seen = []

    async def process_account(c, account_id):
        seen.append((account_id, await c.fetchval(HELD_SQL)))

    async def main():
        conn = await pgsupport.apg("advlock-test/readme-asyncpg")
        try:
            await scope["run"](conn, process_account)
        finally:
            await conn.close()

    asyncio.run(main())
    assert seen == [(42, 1)]
    assert lock_released(admin)


def test_node_postgres_snippet(admin, tmp_path):
    node = shutil.which("node")
    if not node or not (NODE_MODULES / "pg").is_dir():
        pytest.fail("node and pg_test/clients/js/node_modules/pg are needed (scripts/setup.sh installs them)")
    program = tmp_path / "snippet.js"
    program.write_text(textwrap.dedent(f"""\
        const {{ Client }} = require({json.dumps(str(NODE_MODULES / "pg"))});
        const seen = [];
        async function processAccount(client, accountId) {{
          const r = await client.query({json.dumps(HELD_SQL)});
          seen.push([accountId, Number(r.rows[0].count)]);
        }}
        (async () => {{
          const client = new Client({{ host: {json.dumps(pgsupport.HOST)}, port: {pgsupport.PORT},
                                       user: {json.dumps(pgsupport.USER)}, database: {json.dumps(pgsupport.DATABASE)} }});
          await client.connect();
          try {{
        {textwrap.indent(snippet("Node.js, node-postgres"), "    ")}
          }} finally {{ await client.end(); }}
          console.log(JSON.stringify(seen));
        }})().catch(e => {{ console.error(e); process.exit(1); }});
        """))
    out = subprocess.run([node, str(program)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [[42, 1]]
    assert lock_released(admin)


def test_go_pgx_snippet():
    # Go modules come from proxy.golang.org, which this project's machines cannot reach; the
    # snippet is the same statement and casts as the others. Reported as skipped, never passed.
    pytest.skip("Go, pgx: no Go module proxy reachable here; snippet not run")


def test_jdbc_snippet(admin, tmp_path):
    javac, java = shutil.which("javac"), shutil.which("java")
    if not (javac and java and JDBC_JAR.is_file()):
        pytest.fail("javac, java and /usr/share/java/postgresql.jar are needed (scripts/setup.sh installs the jar)")
    source = tmp_path / "Snippet.java"
    url = f"jdbc:postgresql://{pgsupport.HOST}:{pgsupport.PORT}/{pgsupport.DATABASE}?user={pgsupport.USER}"
    source.write_text(textwrap.dedent(f"""\
        import java.sql.*;
        public class Snippet {{
          static String seen = "";
          static void processAccount(Connection conn, long accountId) throws SQLException {{
            try (var st = conn.createStatement(); var rs = st.executeQuery({json.dumps(HELD_SQL)})) {{
              rs.next(); seen += accountId + ":" + rs.getLong(1);
            }}
          }}
          public static void main(String[] args) throws Exception {{
            try (Connection conn = DriverManager.getConnection({json.dumps(url)})) {{
        {textwrap.indent(snippet("Java, JDBC"), "      ")}
            }}
            System.out.println(seen);
          }}
        }}
        """))
    build = subprocess.run([javac, "-cp", str(JDBC_JAR), "-d", str(tmp_path), str(source)],
                           capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stderr
    out = subprocess.run([java, "-cp", f"{JDBC_JAR}:{tmp_path}", "Snippet"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "42:1"
    assert lock_released(admin)


def sql_block_containing(marker):
    """The ```sql block of README.md or docs/ that contains `marker`, as written."""
    matches = [b for b in docexamples.blocks(langs={"sql"}) if marker in b.text]
    assert len(matches) == 1, f"{len(matches)} sql blocks of README.md/docs/ contain {marker!r}"
    return matches[0].text.rstrip("\n")


def test_acquisition_examples_run_as_written(admin, tmp_path):
    """The SQL reference's acquisition examples, pasted into psql as written, while another
    session holds billing/invoice-17: one ERROR (the 55P03 the example shows), no WARNING (the
    shared-lock example runs inside a transaction block), and psql is usable afterwards (the
    example ends its aborted transaction)."""
    script = tmp_path / "examples.sql"
    script.write_text(sql_block_containing("-- Readers share") + "\nSELECT 'usable after the examples' AS marker;\n")
    os.chmod(tmp_path, 0o755)
    os.chmod(script, 0o644)
    holder = psy("billing-worker")
    try:
        assert holder.execute("SELECT advlock_try_with_timeout('billing', 'invoice-17', 0, scope => 'session')").fetchone()[0]
        psql = os.path.join(os.environ.get("PGBIN", "/usr/lib/postgresql/17/bin"), "psql")
        out = subprocess.run([psql, "-X", "-h", pgsupport.HOST, "-p", str(pgsupport.PORT), "-U", pgsupport.USER,
                              "-d", pgsupport.DATABASE, "-f", str(script)], capture_output=True, text=True, timeout=60)
        errors = [line for line in out.stderr.splitlines() if "ERROR:" in line]
        warnings = [line for line in out.stderr.splitlines() if "WARNING:" in line]
        assert len(errors) == 1 and "could not obtain exclusive advisory lock" in errors[0], out.stderr
        assert warnings == [], out.stderr
        assert "usable after the examples" in out.stdout, out.stdout + out.stderr
        assert holder.execute("SELECT advlock_unlock('billing', 'invoice-17')").fetchone()[0] is True
    finally:
        holder.close()
    assert lock_released(admin)


def no_advisory_locks(admin):
    return admin.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                         "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())").fetchone()[0] == 0


def run_psql_block(marker, tmp_path, prelude="", postlude=""):
    """A README ```sql block containing `marker`, run in psql as written (-tA, stop on error)."""
    script = tmp_path / "block.sql"
    script.write_text(prelude + sql_block_containing(marker) + "\n" + postlude)
    os.chmod(tmp_path, 0o755)
    os.chmod(script, 0o644)
    psql = os.path.join(os.environ.get("PGBIN", "/usr/lib/postgresql/17/bin"), "psql")
    out = subprocess.run([psql, "-X", "-q", "-tA", "-v", "ON_ERROR_STOP=1", "-h", pgsupport.HOST,
                          "-p", str(pgsupport.PORT), "-U", pgsupport.USER, "-d", pgsupport.DATABASE,
                          "-f", str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ERROR" not in out.stderr and "WARNING" not in out.stderr, out.stderr
    return out.stdout.split("\n")


def test_key_set_examples_run_as_written(admin, tmp_path):
    """The multi-key examples: both calls true, the unlock true, nothing left held."""
    lines = run_psql_block("-- Move money between accounts 42 and 17", tmp_path)
    assert [line for line in lines if line] == ["t", "t", "t"], lines
    assert no_advisory_locks(admin)


def test_fenced_write_example_runs_as_written(admin, tmp_path):
    """The fenced-write example (in a scratch schema): the row written through the fence,
    whose token is then the holder's; still the holder before unlocking. (The fence is reset
    after, returning that token.)"""
    lines = run_psql_block("CREATE TABLE fenced_resource", tmp_path,
                           prelude="CREATE SCHEMA readme_fence; SET search_path = readme_fence, public;\n",
                           postlude="SELECT value = 'written by the current holder' AND token = :token "
                                    "FROM fenced_resource, advlock_fences WHERE key = advlock_key('report', 'daily');\n"
                                    "SELECT advlock_fence_reset('report', 'daily') = :token;\n"
                                    "DROP SCHEMA readme_fence CASCADE;\n")
    assert [line for line in lines if line] == ["t", "t", "t", "t"], lines
    assert no_advisory_locks(admin)


def test_holding_example_runs_as_written(admin, tmp_path):
    """advlock_holding's example prints what its comments say."""
    lines = run_psql_block("SELECT advlock_holding('leader', 'rollup');            -- true", tmp_path)
    assert [line for line in lines if line] == ["t", "t", "f", "t", "f"], lines
    assert no_advisory_locks(admin)


def test_metrics_example_runs_as_written(admin, tmp_path):
    """The advlock_metrics example: the unknown-namespace row is there with nothing held, and
    the leak count is 0."""
    lines = [line for line in run_psql_block("SELECT advlock_leak_count();          -- 0", tmp_path) if line]
    assert "(unknown)|0|0|0|0|f" in lines or "(unknown)|0|0|0|0|t" in lines, lines
    assert lines[-1] == "0", lines


def test_forgotten_timeout_from_asyncpg_is_the_documented_client_error():
    """docs/reference.md, "Leaving out timeout_ms": what asyncpg shows for the forgotten argument, quoted
    there word for word, is what asyncpg raises (before the call reaches the server)."""
    import asyncpg

    async def main():
        conn = await pgsupport.apg("advlock-test/readme-missing-timeout")
        try:
            with pytest.raises(asyncpg.exceptions.DataError) as e:
                await conn.fetchval("SELECT advlock_try_with_timeout($1, $2)", "account", 42)
            return str(e.value)
        finally:
            await conn.close()

    message = asyncio.run(main())
    assert message == "invalid input for query argument $1: 'account' ('str' object cannot be interpreted as an integer)"
    reference = " ".join((README.parent / "docs" / "reference.md").read_text().split())
    assert f"`DataError: {message}`" in reference
