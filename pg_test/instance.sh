#!/usr/bin/env bash
# Shared helpers: start/stop a throwaway PostgreSQL instance as the `postgres` OS user (and
# scripts/helpers.sh's as_postgres, psql_db, count_tap).
# Sourced by pg_test/run.sh and the other suites' run scripts, bench/run.sh and
# clients/run_tests_common.sh (the clients' run_tests.sh).
# ADVLOCK_PG_MAJOR picks the major (default 17); the instance runs from the test command's
# private tree of that major (scripts/majors.sh: test_pg_config_for, made by scripts/setup.sh),
# never from the system tree, whose running servers the tests must not touch.
# ADVLOCK_PG_CONFIG overrides the pg_config (another copy of a tree).
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/majors.sh"
ADVLOCK_PG_MAJOR=${ADVLOCK_PG_MAJOR:-$ADVLOCK_DEFAULT_MAJOR}
PG_CONFIG=${ADVLOCK_PG_CONFIG:-$(test_pg_config_for "$ADVLOCK_PG_MAJOR")} || exit 1
if [ ! -x "$PG_CONFIG" ]; then
  echo "advlock: no PostgreSQL $ADVLOCK_PG_MAJOR at $PG_CONFIG (the test trees are made by scripts/setup.sh)" >&2
  exit 1
fi
PGBIN=$("$PG_CONFIG" --bindir)
# shellcheck disable=SC2034  # read by the scripts that source this file
PGXS_TEST=$(cd "$(pgxs_test_dir "$ADVLOCK_PG_MAJOR" "$PG_CONFIG")" && pwd)

# as_postgres, psql_db, count_tap
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/helpers.sh"

# instance_start DIR PORT [extra postgresql.conf lines...]
# Initialises DIR/data (owned by postgres) and starts it on 127.0.0.1:PORT with its unix
# socket in DIR. Exports PGHOST/PGPORT/PGUSER for the caller.
instance_start() {
  local dir=$1 port=$2; shift 2
  mkdir -p "$dir"
  chown postgres "$dir" 2>/dev/null || true
  as_postgres "$PGBIN/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-sync >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log"; return 1; }
  {
    echo "port = $port"
    echo "listen_addresses = '127.0.0.1'"
    echo "unix_socket_directories = '$dir'"
    echo "fsync = off"
    echo "max_connections = 200"
    echo "log_line_prefix = '%m [%p] %q%a '"
    for line in "$@"; do echo "$line"; done
  } | as_postgres tee -a "$dir/data/postgresql.conf" >/dev/null
  as_postgres "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 start >/dev/null ||
    { tail -30 "$dir/postgres.log"; return 1; }
  export PGHOST=$dir PGPORT=$port PGUSER=postgres
}

instance_stop() {
  local dir=$1
  [ -f "$dir/data/postmaster.pid" ] && as_postgres "$PGBIN/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1
  return 0
}

# instance_running DIR: the instance in DIR/data is up.
instance_running() {
  [ -f "$1/data/postmaster.pid" ] && as_postgres "$PGBIN/pg_ctl" -D "$1/data" status >/dev/null 2>&1
}
