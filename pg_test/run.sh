#!/usr/bin/env bash
# Runs advlock's out-of-process suites against a temporary PostgreSQL instance (the major in
# ADVLOCK_PG_MAJOR, default 17), started as the `postgres` user with the extension as installed
# in that major (by `cargo pgrx install` or a package):
#   pg_test/regress/sql/*.sql     + expected/*.out   (pg_regress)
#   pg_test/isolation/specs/*.spec + expected/*.out  (pg_isolation_regress)
#   pg_test/clients/test_*.py                        (pytest, real drivers and PgBouncer)
#   pg_test/reliability/test_*.py                    (pytest, faults, load, standby, security)
#   pg_test/upgrade/test_*.py                        (pytest, ALTER EXTENSION UPDATE from released versions)
#   pg_test/monitoring/test_*.py                     (pytest, promtool + a real postgres_exporter)
# Adding a test is dropping in a file. Writes "suite passed failed" lines to $ADVLOCK_SUMMARY.
#
# Usage: pg_test/run.sh [regress|isolation|clients|reliability|upgrade|monitoring ...]   (default: all)
# ADVLOCK_TEST_CONF: extra postgresql.conf lines (newline separated), e.g. a preload.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/instance.sh"

suites=("$@"); [ ${#suites[@]} -gt 0 ] || suites=(regress isolation clients reliability upgrade monitoring)
port=${ADVLOCK_TEST_PORT:-5418}
summary=${ADVLOCK_SUMMARY:-/dev/null}
work=$(mktemp -d /tmp/advlock-pg_test.XXXXXX)
chmod 755 "$work"; chown postgres "$work"
mapfile -t extra_conf < <(printf '%s\n' "${ADVLOCK_TEST_CONF:-}" | sed '/^$/d')

trap 'instance_stop "$work"' EXIT
instance_start "$work" "$port" "${extra_conf[@]}" || { echo "pg_test: could not start PostgreSQL $ADVLOCK_PG_MAJOR"; echo "setup 0 1" >>"$summary"; exit 1; }
echo "pg_test: PostgreSQL $ADVLOCK_PG_MAJOR on port $port, data in $work/data"

status=0
# count_tap FILE SUITE: pg_regress prints "ok N - name" / "not ok N - name" per test (TAP, from
# PostgreSQL 16), or "test name ... ok" / "... FAILED" (PostgreSQL 15).
count_tap() {
  local passed failed
  passed=$(grep -cE '^ok [0-9]+|\.\.\. ok ' "$1")
  failed=$(grep -cE '^not ok [0-9]+|\.\.\. FAILED' "$1")
  echo "$2 $passed $failed" >>"$summary"
  echo "pg_test: $2: $passed passed, $failed failed"
}

run_regress_like() { # suite driver inputdir files...
  local suite=$1 driver=$2 input=$3; shift 3
  [ $# -gt 0 ] || { echo "pg_test: $suite: no tests"; return 0; }
  mkdir -p "$work/$suite"; chown postgres "$work/$suite"
  # The drivers run as postgres, which may not be able to read the checkout (e.g. under /root).
  cp -r "$input" "$work/$suite-input"; chown -R postgres "$work/$suite-input"; input="$work/$suite-input"
  as_postgres "$driver" --bindir="$PGBIN" --host="$work" --port="$port" --user=postgres \
    --inputdir="$input" --outputdir="$work/$suite" --dbname="advlock_$suite" \
    --load-extension=advlock "$@" >"$work/$suite.log" 2>&1
  local rc=$?
  cat "$work/$suite.log"
  if [ $rc -ne 0 ] && ! grep -qE '^not ok [0-9]+|\.\.\. FAILED' "$work/$suite.log"; then
    echo "$suite 0 1" >>"$summary"   # the driver itself failed (e.g. a missing expected file)
    echo "pg_test: $suite: driver failed"
  else
    count_tap "$work/$suite.log" "$suite"
  fi
  if [ $rc -ne 0 ]; then
    status=1
    [ -f "$work/$suite/regression.diffs" ] && head -200 "$work/$suite/regression.diffs"
  fi
}

# run_pytest SUITE: pytest over pg_test/SUITE/test_*.py in its own database advlock_SUITE
# (extension created), with the instance described by ADVLOCK_PG* variables.
run_pytest() {
  local suite=$1 dir="$here/$1" rc passed failed
  if ! ls "$dir"/test_*.py >/dev/null 2>&1; then echo "pg_test: $suite: no tests"; return 0; fi
  as_postgres "$PGBIN/psql" -X -q -h "$work" -p "$port" -U postgres -d postgres \
    -c "CREATE DATABASE advlock_$suite" -c "\\c advlock_$suite" -c "CREATE EXTENSION advlock" >/dev/null || status=1
  (cd "$dir" && ADVLOCK_PGHOST=127.0.0.1 ADVLOCK_PGPORT=$port ADVLOCK_PGDATABASE=advlock_$suite \
    ADVLOCK_WORKDIR="$work" ADVLOCK_PGDATA="$work/data" PGBIN="$PGBIN" \
    "$here/.venv/bin/python" -m pytest -q -p no:cacheprovider \
    --junitxml="$work/$suite.xml" . 2>&1 | tee "$work/$suite.log")
  rc=${PIPESTATUS[0]}
  read -r passed failed < <("$here/.venv/bin/python" - "$work/$suite.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception:
    print(0, 1); sys.exit()
suites = [root] if root.tag == "testsuite" else list(root)
total = sum(int(s.get("tests", 0)) for s in suites)
failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
skipped = sum(int(s.get("skipped", 0)) for s in suites)
print(total - failed - skipped, failed)
PY
)
  echo "$suite $passed $failed" >>"$summary"
  echo "pg_test: $suite: $passed passed, $failed failed"
  [ "$rc" -eq 0 ] || status=1
}

for suite in "${suites[@]}"; do
  case $suite in
    regress)
      tests=(); for f in "$here"/regress/sql/*.sql; do tests+=("$(basename "$f" .sql)"); done
      run_regress_like regress "$PGXS_TEST/regress/pg_regress" "$here/regress" "${tests[@]}" ;;
    isolation)
      specs=(); for f in "$here"/isolation/specs/*.spec; do specs+=("$(basename "$f" .spec)"); done
      # A spec whose first line says "# requires-extension: X" runs only where X is installed
      # (the PostgreSQL 16 wheel has no dblink); every skip is printed and counted.
      runnable=()
      for spec in "${specs[@]}"; do
        needs=$(sed -n '1s/^# requires-extension: *//p' "$here/isolation/specs/$spec.spec")
        if [ -n "$needs" ] && [ ! -f "$("$PG_CONFIG" --sharedir)/extension/$needs.control" ]; then
          echo "pg_test: isolation: SKIPPED $spec: needs extension $needs, which PostgreSQL $ADVLOCK_PG_MAJOR here does not have"
          echo "isolation-skipped 0 0 $spec" >>"$summary"
        else
          runnable+=("$spec")
        fi
      done
      specs=("${runnable[@]}")
      run_regress_like isolation "$PGXS_TEST/isolation/pg_isolation_regress" "$here/isolation" "${specs[@]}" ;;
    clients|reliability|upgrade|monitoring)
      run_pytest "$suite" ;;
    *) echo "pg_test: unknown suite $suite"; status=1 ;;
  esac
done

if [ $status -ne 0 ]; then
  echo "pg_test: server log tail ($work/postgres.log):"; tail -40 "$work/postgres.log"
fi
exit $status
