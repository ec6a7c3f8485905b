# shellcheck shell=bash
# Shell helpers shared by advlock's scripts (sourced; defines functions only):
#   as_postgres CMD...   run CMD as the `postgres` OS user (initdb and the servers refuse root)
#   psql_db ARGS...      psql as postgres to the instance at $work (socket directory) and $port,
#                        stopping at the first error; -d $psql_dbname when that is set
#   count_tap LOG        "passed failed" from a pg_regress / pg_isolation_regress log: "ok N - name"
#                        and "not ok N - name" (TAP, PostgreSQL 16+), "... ok" / "... FAILED" (15)

as_postgres() {
  if [ "$(id -un)" = postgres ]; then "$@"; else sudo -u postgres -- "$@"; fi
}

psql_db() {
  # shellcheck disable=SC2154  # $work and $port are the caller's
  as_postgres "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$work" -p "$port" -U postgres \
    ${psql_dbname:+-d "$psql_dbname"} "$@"
}

count_tap() {
  echo "$(grep -cE '^ok [0-9]+|\.\.\. ok ' "$1") $(grep -cE '^not ok [0-9]+|\.\.\. FAILED' "$1")"
}
