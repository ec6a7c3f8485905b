#!/usr/bin/env bash
# Runs advlock's out-of-process suites against a temporary PostgreSQL instance (the major in
# ADVLOCK_PG_MAJOR, default 17), started as the `postgres` user from that major's test tree
# (pg_test/instance.sh) with the extension as installed there (by scripts/install_ext.sh,
# `cargo pgrx test` through the test PGRX_HOME, or a package):
#   pg_test/regress/sql/*.sql     + expected/*.out   (pg_regress)
#   pg_test/isolation/specs/*.spec + expected/*.out  (pg_isolation_regress)
#   pg_test/clients/test_*.py                        (pytest, real drivers and PgBouncer)
#   pg_test/reliability/test_*.py                    (pytest, faults, load, standby, security)
#   pg_test/upgrade/test_*.py                        (pytest, ALTER EXTENSION UPDATE from released versions)
#   pg_test/monitoring/test_*.py                     (pytest, promtool + a real postgres_exporter and Prometheus)
#   pg_test/leases/test_*.py                         (pytest, leases between real sessions, PgBouncer)
#   pg_test/failover/test_*.py                       (pytest, leases across a crash, a restart and a
#                                                     standby's promotion, on clusters of its own)
#   pg_test/encodings/test_*.py                      (pytest, install/update/edition/messages in
#                                                     UTF8, EUC_JP, LATIN1, WIN1251, SQL_ASCII databases)
# Adding a test is dropping in a file. Writes "suite passed failed" lines to $ADVLOCK_SUMMARY.
#
# Usage: pg_test/run.sh [SUITE [NAME...]]...   (default: every suite, every test)
#   SUITE: regress, isolation, clients, reliability, upgrade, monitoring, leases, failover or encodings
#   NAME:  only these tests of the suite before it: a regress file (regress/sql/NAME.sql), an
#          isolation spec (isolation/specs/NAME.spec), for pytest suites a file or node id
#          (test_keys.py, test_keys.py::test_name); e.g. pg_test/run.sh regress failed_statement
# ADVLOCK_TEST_PORT: the instance's port (default 5418).
# ADVLOCK_ONLY: the same NAMEs for every suite named (ADVLOCK_ONLY=keys pg_test/run.sh regress).
# ADVLOCK_TEST_CONF: extra postgresql.conf lines (newline separated), e.g. a preload.
# ADVLOCK_TEST_KEEP=1: leave the instance running after the run, in
#   /tmp/advlock-pg_test-keep-MAJOR-PORT, and run against it the next time (made anew when the
#   major, pg_config or ADVLOCK_TEST_CONF differ); ADVLOCK_TEST_KEEP=stop stops and removes it.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/instance.sh"

all_suites=(regress isolation clients reliability upgrade monitoring leases failover encodings)
suites=(); declare -A picks=()
for arg in "$@"; do
  if [[ " ${all_suites[*]} " == *" $arg "* ]]; then suites+=("$arg"); picks[$arg]=""
  elif [ ${#suites[@]} -gt 0 ]; then picks[${suites[-1]}]+=" $arg"
  else echo "pg_test: unknown suite $arg (suites: ${all_suites[*]})"; exit 2; fi
done
[ ${#suites[@]} -gt 0 ] || suites=("${all_suites[@]}")
if [ -n "${ADVLOCK_ONLY:-}" ]; then for s in "${suites[@]}"; do picks[$s]+=" $ADVLOCK_ONLY"; done; fi
port=${ADVLOCK_TEST_PORT:-5418}
summary=${ADVLOCK_SUMMARY:-/dev/null}
mapfile -t extra_conf < <(printf '%s\n' "${ADVLOCK_TEST_CONF:-}" | sed '/^$/d')

if [ -n "${ADVLOCK_TEST_KEEP:-}" ]; then
  work=/tmp/advlock-pg_test-keep-$ADVLOCK_PG_MAJOR-$port
  if [ "$ADVLOCK_TEST_KEEP" = stop ]; then
    instance_stop "$work"; rm -rf "$work"; echo "pg_test: stopped and removed $work"; exit 0
  fi
  identity=$(printf '%s\n' "$PG_CONFIG" "${extra_conf[@]}")
  if instance_running "$work" && [ "$(cat "$work/keep.identity" 2>/dev/null)" = "$identity" ]; then
    export PGHOST=$work PGPORT=$port PGUSER=postgres
    echo "pg_test: reusing the instance left running in $work"
  else
    instance_stop "$work"; rm -rf "$work"; mkdir -p "$work"
    chmod 755 "$work"; chown postgres "$work"
    instance_start "$work" "$port" "${extra_conf[@]}" || { echo "pg_test: could not start PostgreSQL $ADVLOCK_PG_MAJOR"; echo "setup 0 1" >>"$summary"; exit 1; }
    echo "$identity" >"$work/keep.identity"
  fi
  trap 'echo "pg_test: instance left running in $work (ADVLOCK_TEST_KEEP=stop pg_test/run.sh stops it)"' EXIT
else
  work=$(mktemp -d /tmp/advlock-pg_test.XXXXXX)
  chmod 755 "$work"; chown postgres "$work"
  trap 'instance_stop "$work"' EXIT
  instance_start "$work" "$port" "${extra_conf[@]}" || { echo "pg_test: could not start PostgreSQL $ADVLOCK_PG_MAJOR"; echo "setup 0 1" >>"$summary"; exit 1; }
fi
echo "pg_test: PostgreSQL $ADVLOCK_PG_MAJOR on port $port, data in $work/data"

status=0
# record_tap FILE SUITE: the driver's log counted (count_tap, scripts/helpers.sh) into the summary.
record_tap() {
  local passed failed
  read -r passed failed < <(count_tap "$1")
  echo "$2 $passed $failed" >>"$summary"
  echo "pg_test: $2: $passed passed, $failed failed"
}

run_regress_like() { # suite driver inputdir files...
  local suite=$1 driver=$2 input=$3; shift 3
  [ $# -gt 0 ] || { echo "pg_test: $suite: no tests"; return 0; }
  mkdir -p "$work/$suite"; chown postgres "$work/$suite"
  # The drivers run as postgres, which may not be able to read the checkout (e.g. under /root).
  rm -rf "$work/$suite-input"; cp -r "$input" "$work/$suite-input"; chown -R postgres "$work/$suite-input"; input="$work/$suite-input"
  as_postgres "$driver" --bindir="$PGBIN" --host="$work" --port="$port" --user=postgres \
    --inputdir="$input" --outputdir="$work/$suite" --dbname="advlock_$suite" \
    --load-extension=advlock "$@" >"$work/$suite.log" 2>&1
  local rc=$?
  cat "$work/$suite.log"
  if [ $rc -ne 0 ] && ! grep -qE '^not ok [0-9]+|\.\.\. FAILED' "$work/$suite.log"; then
    echo "$suite 0 1" >>"$summary"   # the driver itself failed (e.g. a missing expected file)
    echo "pg_test: $suite: driver failed"
  else
    record_tap "$work/$suite.log" "$suite"
  fi
  if [ $rc -ne 0 ]; then
    status=1
    [ -f "$work/$suite/regression.diffs" ] && head -200 "$work/$suite/regression.diffs"
  fi
}

# run_pytest SUITE [TARGET...]: pytest over pg_test/SUITE/test_*.py (or the TARGETs: files or
# node ids) in its own database advlock_SUITE (extension created), with the instance described
# by ADVLOCK_PG* variables.
run_pytest() {
  local suite=$1 dir="$here/$1" rc passed failed; shift
  local targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=(.)
  if ! ls "$dir"/test_*.py >/dev/null 2>&1; then echo "pg_test: $suite: no tests"; return 0; fi
  as_postgres "$PGBIN/psql" -X -q -h "$work" -p "$port" -U postgres -d postgres \
    -c "DROP DATABASE IF EXISTS advlock_$suite WITH (FORCE)" -c "CREATE DATABASE advlock_$suite" -c "\\c advlock_$suite" -c "CREATE EXTENSION advlock" >/dev/null || status=1
  (cd "$dir" && ADVLOCK_PGHOST=127.0.0.1 ADVLOCK_PGPORT=$port ADVLOCK_PGDATABASE=advlock_$suite \
    ADVLOCK_WORKDIR="$work" ADVLOCK_PGDATA="$work/data" PGBIN="$PGBIN" \
    "$here/.venv/bin/python" -m pytest -q -p no:cacheprovider \
    --junitxml="$work/$suite.xml" "${targets[@]}" 2>&1 | tee "$work/$suite.log")
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

# pick SUITE DIR EXT: tests=(the NAMEs given for SUITE, each DIR/NAME.EXT), else every file of DIR.
pick() {
  local suite=$1 dir=$2 ext=$3 name f names
  read -r -a names <<<"${picks[$suite]:-}"
  tests=()
  if [ ${#names[@]} -eq 0 ]; then
    for f in "$here/$dir"/*."$ext"; do tests+=("$(basename "$f" ".$ext")"); done
    return
  fi
  for name in "${names[@]}"; do
    if [ -f "$here/$dir/$name.$ext" ]; then tests+=("$name")
    else echo "pg_test: $suite: no such test pg_test/$dir/$name.$ext"; echo "$suite 0 1 no test $name" >>"$summary"; status=1; fi
  done
}

for suite in "${suites[@]}"; do
  case $suite in
    regress)
      pick regress regress/sql sql
      run_regress_like regress "$PGXS_TEST/regress/pg_regress" "$here/regress" "${tests[@]}" ;;
    isolation)
      pick isolation isolation/specs spec; specs=("${tests[@]}")
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
    clients|reliability|upgrade|monitoring|leases|failover|encodings)
      read -r -a targets <<<"${picks[$suite]:-}"
      run_pytest "$suite" "${targets[@]}" ;;
    *) echo "pg_test: unknown suite $suite"; status=1 ;;
  esac
done

if [ $status -ne 0 ]; then
  echo "pg_test: server log tail ($work/postgres.log):"; tail -40 "$work/postgres.log"
fi
exit $status
