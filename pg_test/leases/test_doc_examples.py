"""docs/leases.md's examples and the README's lease example, run as written in psql (they use \\gset), preloaded: every value a
comment states is what psql prints, and nothing raises or warns."""
import os
import re
import subprocess
from pathlib import Path

import pytest

import pgsupport
from conftest import needs_preload

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "leases.md"


def sql_blocks():
    """docs/leases.md's blocks, then the README's lease example."""
    readme = [b for b in re.findall(r"```sql\n(.*?)\n```", (REPO / "README.md").read_text(), re.S)
              if "advlock_lease_renew(:lease" in b]
    return re.findall(r"```sql\n(.*?)\n```", DOC.read_text(), re.S) + readme


def stated_values(block):
    """The values stated after `;  -- ` on statement lines, in order."""
    return [m.group(1).strip() for m in re.finditer(r";[ \t]*--[ \t]*(\S[^\n]*)$", block, re.M)]


@needs_preload
@pytest.mark.parametrize("index", range(len(sql_blocks())))
def test_lease_doc_examples(index, tmp_path, admin):
    block = sql_blocks()[index]
    script = tmp_path / "example.sql"
    script.write_text(block + "\n")
    os.chmod(tmp_path, 0o755)
    os.chmod(script, 0o644)
    psql = os.path.join(os.environ.get("PGBIN", "/usr/lib/postgresql/17/bin"), "psql")
    try:
        out = subprocess.run([psql, "-X", "-q", "-tA", "-F", " | ", "-v", "ON_ERROR_STOP=1",
                              "-h", pgsupport.HOST, "-p", str(pgsupport.PORT), "-U", pgsupport.USER,
                              "-d", pgsupport.DATABASE, "-f", str(script)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and "WARNING" not in out.stderr, out.stderr
        # (a void result, e.g. advlock_fence's, prints an empty line: no value to state)
        assert [line for line in out.stdout.split("\n") if line] == stated_values(block), out.stdout
    finally:
        admin.execute("DROP TABLE IF EXISTS report_output")
        admin.execute("SELECT advlock_fence_reset('report', 'daily')")
