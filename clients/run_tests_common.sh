# shellcheck shell=bash
# What clients/{python,ruby,node}/run_tests.sh share, sourced by each at its start (after setting
# `client`, its summary name such as python-client, and `repo`, the repository's root). Each
# keeps its own checks (lint, types, packaging) and the run and counting of its test framework;
# the servers its tests run against are the same for the three and are started here:
#   passed, failed   the run's counts; check NAME COMMAND... counts one check, report prints
#                    "CLIENT: P passed, F failed" and appends "CLIENT P F" to $ADVLOCK_SUMMARY
#   work             a new directory /tmp/advlock-NAME.XXXXXX (NAME: client without "-client"),
#                    readable by the postgres OS user; on exit the instances started in it are
#                    stopped and it is removed
#   start_servers DB FIRST_PORT [PORT]
#                    starts, with pg_test/instance.sh, PostgreSQL on PORT (default: the first free
#                    port from FIRST_PORT) in $work/pg with databases DB (CREATE EXTENSION advlock)
#                    and DB_edition (the SQL edition, edition/advlock_sql.sql), and a second
#                    instance with advlock in shared_preload_libraries on the next free port in
#                    $work/pre with database DB (the only one where leases work). Sets port,
#                    port_pre and preloaded (0: the second instance did not start); counts a
#                    failure for each part that did not work, and exits (after report) when the
#                    first instance did not start.
# PGBIN (from pg_test/instance.sh: the test tree's binaries) is exported for the tests: the
# PgBouncer launcher (pg_test/pgbouncer_launcher.py) probes with its psql.

: "${client:?set client before sourcing run_tests_common.sh}" "${repo:?set repo before sourcing run_tests_common.sh}"
# shellcheck source=SCRIPTDIR/../pg_test/instance.sh
. "$repo/pg_test/instance.sh"
export PGBIN

summary=${ADVLOCK_SUMMARY:-/dev/null}
passed=0 failed=0
report() {
  echo "$client $passed $failed" >>"$summary"
  echo "$client: $passed passed, $failed failed"
}
check() { # name command...
  local name=$1; shift
  if "$@"; then passed=$((passed + 1)); echo "$client: ok   $name"
  else failed=$((failed + 1)); echo "$client: FAIL $name"; fi
}

work=$(mktemp -d "/tmp/advlock-${client%-client}.XXXXXX")
chmod 755 "$work"
trap 'instance_stop "$work/pre"; instance_stop "$work/pg"; rm -rf "$work"' EXIT

# free_port FROM: the first port from FROM nobody listens on (PostgreSQL's socket lock file is
# in our own directory, so only the TCP port can clash).
free_port() {
  local p
  for p in $(seq "$1" $(($1 + 100))); do
    (: <"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
  echo "$1"
}

psql_at() { # port psql-arguments...
  local p=$1; shift
  "$PGBIN/psql" -X -q -h 127.0.0.1 -p "$p" -U postgres -v ON_ERROR_STOP=1 "$@"
}

# shellcheck disable=SC2034  # preloaded is read by the run_tests.sh that sourced this file
start_servers() { # DB FIRST_PORT [PORT]
  local db=$1
  port=${3:-$(free_port "$2")}
  port_pre=$(free_port $((port + 1)))
  if ! instance_start "$work/pg" "$port" ||
     ! psql_at "$port" -d postgres -c "CREATE DATABASE $db" -c "CREATE DATABASE ${db}_edition" ||
     ! psql_at "$port" -d "$db" -c "CREATE EXTENSION advlock"; then
    echo "$client: could not start PostgreSQL with the advlock extension"
    failed=$((failed + 1)); report; exit 1
  fi
  # The same API in a database without the extension (the SQL edition, for managed PostgreSQL).
  if ! PGOPTIONS='-c search_path=public' psql_at "$port" -d "${db}_edition" -f "$repo/edition/advlock_sql.sql" >"$work/edition.log" 2>&1; then
    cat "$work/edition.log"; echo "$client: could not install the SQL edition"
    failed=$((failed + 1))
  fi
  # Leases need advlock's shared memory: a preloaded instance.
  preloaded=1
  if ! instance_start "$work/pre" "$port_pre" "shared_preload_libraries = 'advlock'" ||
     ! psql_at "$port_pre" -d postgres -c "CREATE DATABASE $db" ||
     ! psql_at "$port_pre" -d "$db" -c "CREATE EXTENSION advlock"; then
    echo "$client: could not start PostgreSQL with advlock in shared_preload_libraries"
    failed=$((failed + 1)) preloaded=0
  fi
}
