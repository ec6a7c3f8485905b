#!/usr/bin/env bash
# The Python client's checks: ruff, mypy --strict, then pytest against a real PostgreSQL with
# the advlock extension (started here with pg_test/instance.sh, stopped on exit).
# Appends "python-client PASSED FAILED" to $ADVLOCK_SUMMARY if set (ruff and mypy count as one
# check each). Works as root on a fresh machine: the venv is built here, cached in
# clients/python/.venv, and rebuilt when requirements-test.txt or pyproject.toml change.
# ADVLOCK_PY_PORT picks the port (default: the first free one from 5433).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
summary=${ADVLOCK_SUMMARY:-/dev/null}
venv="$here/.venv"
passed=0 failed=0
report() {
  echo "python-client $passed $failed" >>"$summary"
  echo "python-client: $passed passed, $failed failed"
}

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
if "$venv/bin/ruff" check src tests; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
if "$venv/bin/mypy" --strict src/advlock; then passed=$((passed + 1)); else failed=$((failed + 1)); fi

# shellcheck source=SCRIPTDIR/../../pg_test/instance.sh disable=SC1091  # followed with shellcheck -x
. "$repo/pg_test/instance.sh"
port=${ADVLOCK_PY_PORT:-}
if [ -z "$port" ]; then
  # The first port nobody listens on (PostgreSQL's socket lock file is in our own directory).
  for port in $(seq 5433 5533); do
    (: <"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
  done
fi
work=$(mktemp -d /tmp/advlock-python.XXXXXX)
chmod 755 "$work"
trap 'instance_stop "$work"; rm -rf "$work"' EXIT
if ! instance_start "$work" "$port" ||
   ! "$PGBIN/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 \
       -c "CREATE DATABASE advlock_python" -c "\\c advlock_python" -c "CREATE EXTENSION advlock"; then
  echo "python-client: could not start PostgreSQL with the advlock extension"
  failed=$((failed + 1)); report; exit 1
fi

ADVLOCK_PY_DSN="postgresql://postgres@127.0.0.1:$port/advlock_python" \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider --junitxml="$work/junit.xml" tests
rc=$?
read -r p f < <("$venv/bin/python" - "$work/junit.xml" <<'PY'
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
passed=$((passed + p)) failed=$((failed + f))
[ "$rc" -eq 0 ] || [ "$f" -gt 0 ] || failed=$((failed + 1))   # pytest failed without a test failing
report
[ "$failed" -eq 0 ]
