"""The grant-vs-timeout race stress of pg_test/reliability (test_faults.test_grant_timeout_race,
reused as is: same pairs, same invariants, same assertions; it prints its figures) against
the SQL edition.
Connection as relsupport reads it: ADVLOCK_PGHOST / ADVLOCK_PGPORT / ADVLOCK_PGDATABASE.
Iterations: 2,000 per pair (ADVLOCK_FULL=1: 20,000; ADVLOCK_SMALL=1: 500). Prints the figures; exits 1 on a violation.
"""
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "reliability"))
import test_faults  # noqa: E402

try:
    test_faults.test_grant_timeout_race(None, 7_160_000)
    ok = True
except AssertionError:
    traceback.print_exc()
    ok = False
print("race: " + ("passed" if ok else "FAILED"))
sys.exit(0 if ok else 1)
