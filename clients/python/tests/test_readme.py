"""Every ```python block of clients/python/README.md runs as written (DATABASE_URL set), in the
fresh venv run_tests.sh builds from the README's install line; the lease examples on a preloaded
server only (skipped elsewhere, saying why)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DSN, needs_leases

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```$", README.read_text(encoding="utf-8"), re.S | re.M)


def test_readme_has_examples() -> None:
    assert len(BLOCKS) >= 7
    assert len(re.findall(r"# -> ", "".join(BLOCKS))) >= 4


# The lease and election examples need advlock preloaded: they run on run_tests.sh's preloaded
# instance.
PRELOADED_ONLY = ("advlock.lease(", "advlock.leader(", "advlock.observe(")
CASES = [
    pytest.param(code, marks=needs_leases()) if any(f in code for f in PRELOADED_ONLY) else pytest.param(code)
    for code in BLOCKS
]


def test_readme_has_lease_examples() -> None:
    assert sum("advlock.lease(" in code for code in BLOCKS) >= 2


def test_readme_documents_election_and_fences() -> None:
    for helper in ("advlock.leader(", "advlock.observe(", "advlock.fence(", "advlock.lease_check("):
        assert any(helper in code for code in BLOCKS), helper


@pytest.mark.parametrize("code", CASES, ids=[f"block{i + 1}" for i in range(len(BLOCKS))])
def test_s34_readme_example_runs(code: str) -> None:
    env = {**os.environ, "DATABASE_URL": DSN}
    # run_tests.sh names a fresh venv with only the README's install line in it.
    python = os.environ.get("ADVLOCK_README_PYTHON") or sys.executable
    done = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{code}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    # `# -> text`: output the example promises.
    for expected in re.findall(r"# -> (.+)$", code, re.M):
        assert expected.strip() in done.stdout, f"{expected!r} not in the output:\n{done.stdout}"
