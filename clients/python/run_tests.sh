#!/usr/bin/env bash
# The Python client's checks: ruff, mypy --strict, then pytest against a real PostgreSQL with
# the advlock extension, against the SQL edition (one instance), and against a second instance
# with advlock in shared_preload_libraries (the same suite preloaded, and the only run where
# leases work: the lease tests skip elsewhere, saying why, and check the error there instead);
# clients/run_tests_common.sh starts both instances (stopped on exit) and counts, as for the
# Ruby and Node clients. The PgBouncer tests start real PgBouncers (transaction, statement,
# session mode) with pg_test/pgbouncer_launcher.py, through pgtestsupport.pgbouncer.
# Appends "python-client PASSED FAILED" to $ADVLOCK_SUMMARY if set (ruff and mypy count as one
# check each). Works as root on a fresh machine: the venv is built here, cached in
# clients/python/.venv, and rebuilt when requirements-test.txt or pyproject.toml change.
# ADVLOCK_PY_PORT picks the port (default: the first free one from 5433); the preloaded instance
# takes the next free one. Arguments, if any, go to pytest in place of `tests` (e.g.
# tests/test_poolers.py, or -k s17 tests).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
client=python-client
# shellcheck source=SCRIPTDIR/../run_tests_common.sh
. "$repo/clients/run_tests_common.sh"
venv="$here/.venv"
pytest_args=("$@"); [ $# -gt 0 ] || pytest_args=(tests)

stamp=$(cat "$here/requirements-test.txt" "$here/pyproject.toml" | sha256sum | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "python-client: creating $venv"
  rm -rf "$venv"
  if ! python3 -m venv "$venv" ||
     ! "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements-test.txt" ||
     ! "$venv/bin/pip" install -q --disable-pip-version-check "${here}[psycopg,asyncpg,sqlalchemy]"; then
    failed=1; report; exit 1
  fi
  echo "$stamp" >"$venv/.stamp"
fi
# The package as it is in the work tree now (the extras are already installed).
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps --no-build-isolation --force-reinstall "$here" ||
  { failed=1; report; exit 1; }

cd "$here" || exit 1
check ruff "$venv/bin/ruff" check src tests recipes
# The tests too: they pin what the overloads return (bool vs Awaitable[bool]).
check "mypy --strict" "$venv/bin/mypy" --strict src/advlock tests recipes

start_servers advlock_python 5433 "${ADVLOCK_PY_PORT:-}"

# The README's examples run in a fresh venv holding only the package with the extras its
# install line names (tests/test_readme.py runs them with ADVLOCK_README_PYTHON), as a new user
# gets it: a missing extra fails them.
extras=$(sed -n 's/^pip install "[^"]*\[\([a-z,]*\)\]".*/\1/p' "$here/README.md" | head -1)
readme_venv="$work/readme-venv"
if [ -z "$extras" ] || ! python3 -m venv "$readme_venv" ||
   ! "$readme_venv/bin/pip" install -q --disable-pip-version-check "${here}[$extras]"; then
  echo "python-client: could not build the README's venv (extras '$extras')"; failed=$((failed + 1))
fi
export ADVLOCK_README_PYTHON="$readme_venv/bin/python"

# run_pytest NAME DATABASE [PORT]: pytest against DATABASE, counted from its JUnit report.
run_pytest() {
  echo "python-client: pytest against $1 (database $2)"
  ADVLOCK_PY_DSN="postgresql://postgres@127.0.0.1:${3:-$port}/$2" \
    "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider --junitxml="$work/$1.xml" "${pytest_args[@]}"
  local rc=$? p f
  read -r p f < <("$venv/bin/python" - "$work/$1.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception:
    print(0, 1); sys.exit()
suites = [root] if root.tag == "testsuite" else list(root)
count = lambda k: sum(int(s.get(k, 0)) for s in suites)
bad = count("failures") + count("errors")
print(count("tests") - bad - count("skipped"), bad)
PY
)
  [ "$rc" -eq 0 ] || [ "$f" -gt 0 ] || f=1   # pytest failed without a test failing
  echo "python-client: $1: $p passed, $f failed"
  passed=$((passed + p)) failed=$((failed + f))
}
run_pytest extension advlock_python
run_pytest edition advlock_python_edition
# S45 restarts the preloaded instance (pg_ctl restart -m fast, as the postgres user) while a
# lease is held: it needs the instance's pg_ctl, data directory and log (the other runs have
# none, and their S45 tests skip saying so).
[ "$preloaded" -eq 0 ] ||
  ADVLOCK_PY_PG_CTL="$PGBIN/pg_ctl" ADVLOCK_PY_PGDATA="$work/pre/data" ADVLOCK_PY_PGLOG="$work/pre/postgres.log" \
    run_pytest preloaded advlock_python "$port_pre"
report
[ "$failed" -eq 0 ]
