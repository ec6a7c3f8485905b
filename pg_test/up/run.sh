#!/usr/bin/env bash
# scripts/up.sh, the development cluster, as a new user runs it -- on the test command's tree of
# the default major (ADVLOCK_PG_CONFIG; never the system's), in a data directory and on a port
# of its own -- then every lease and election example against that cluster, as written:
#   1. the first run: exits 0; prints leases working, the extension in schema public, the
#      idle-lock timeout off and how to turn it on; the server says the same (preload, schema,
#      advlock.idle_session_lock_timeout = 0, a lease taken and released)
#   2. a second run with ADVLOCK_DEV_CONF setting the idle-lock timeout: the data kept, the
#      setting applied by a reload (the postmaster not restarted)
#   3. a third run with a setting that needs a restart (max_locks_per_transaction): restarted,
#      applied, the data kept
#   4. the examples that need the preload, against the cluster's database `advlock`
#      (DATABASE_URL as up.sh prints it): README.md's lease example with docs/leases.md's and
#      docs/leader-election.md's (pg_test/leases/test_doc_examples.py), and every example of the
#      Python, Ruby and Node client READMEs (each client's own README test; run after the
#      clients' suites, which leave their environments: clients/python/.venv, clients/node's
#      node_modules and build)
# Prints "up: N passed, M failed" and writes "up N M" to $ADVLOCK_SUMMARY. The cluster is
# stopped and removed at the end.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
. "$repo/scripts/majors.sh"
. "$repo/scripts/helpers.sh"
summary=${ADVLOCK_SUMMARY:-/dev/null}
major=$ADVLOCK_DEFAULT_MAJOR
pgc=$(test_pg_config_for "$major")
pgbin=$("$pgc" --bindir)
work=$(mktemp -d /tmp/advlock-up.XXXXXX)
chown postgres "$work"
data="$work/data"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dsn="postgresql://postgres@127.0.0.1:$port/advlock"
cleanup() {
  [ -f "$data/postmaster.pid" ] && as_postgres "$pgbin/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

passed=0 failed=0
check() { # name command...
  if "${@:2}"; then passed=$((passed + 1)); echo "up: ok   $1"
  else failed=$((failed + 1)); echo "up: FAIL $1"; fi
}
up() { # log [ADVLOCK_DEV_CONF]
  ADVLOCK_PG_CONFIG=$pgc ADVLOCK_PGDATA=$data ADVLOCK_PORT=$port ADVLOCK_DEV_CONF=${2:-} \
    "$repo/scripts/up.sh" >"$work/$1" 2>&1 || { tail -30 "$work/$1"; return 1; }
}
said() { grep -qF -- "$2" "$work/$1" || { echo "up: $1 does not say: $2"; sed 's/^/    | /' "$work/$1"; return 1; }; }
sql() { "$pgbin/psql" -X -q -tA -h 127.0.0.1 -p "$port" -U postgres -d advlock -c "$1"; }
is() { # what sql expected
  local got; got=$(sql "$2" 2>&1)
  [ "$got" = "$3" ] || { echo "up: $1: $2 gave '$got', expected '$3'"; return 1; }
}

echo "up: scripts/up.sh on PostgreSQL $major's test tree, data $data, port $port"
# 1. The first run.
check "the first run exits 0" up first.log
check "it says leases work" said first.log "leases (working)"
check "it says the extension is in schema public" said first.log "database advlock, extension in schema public"
check "it says the idle-lock timeout is off and how to turn it on" \
  said first.log "advlock.idle_session_lock_timeout = 0: off. Turn it on"
check "it prints DATABASE_URL" said first.log "export DATABASE_URL=$dsn"
check "preloaded" is preload "SHOW shared_preload_libraries" advlock
check "CREATE EXTENSION ... SCHEMA public" is schema \
  "SELECT extnamespace::regnamespace FROM pg_extension WHERE extname = 'advlock'" public
check "the idle-lock timeout off" is idle "SHOW advlock.idle_session_lock_timeout" 0
check "a lease taken and released" is lease \
  "SELECT advlock_lease_release(advlock_lease('up', 'check', 1000, 0))" t
sql "CREATE TABLE kept AS SELECT 42 AS answer" >/dev/null
started=$(sql "SELECT pg_postmaster_start_time()")

# 2. A setting a reload applies.
check "a second run with ADVLOCK_DEV_CONF exits 0" \
  up second.log "advlock.idle_session_lock_timeout = '5min'"
check "it reloaded" said second.log "[up] reloaded: conf.d/advlock-dev.conf changed"
check "the setting is applied" is idle "SHOW advlock.idle_session_lock_timeout" 5min
check "the postmaster was not restarted" is restart "SELECT pg_postmaster_start_time()" "$started"
check "the data is kept" is kept "SELECT answer FROM kept" 42

# 3. A setting that needs a restart.
check "a third run with a setting that needs a restart exits 0" up third.log "max_locks_per_transaction = 128"
check "it restarted" said third.log "[up] restarting PostgreSQL $major to apply max_locks_per_transaction"
check "the setting is applied" is locks "SHOW max_locks_per_transaction" 128
check "the one ADVLOCK_DEV_CONF no longer names is gone" is idle "SHOW advlock.idle_session_lock_timeout" 0
check "the data is kept" is kept "SELECT answer FROM kept" 42
sql "DROP TABLE kept" >/dev/null

# 4. The examples that need the preload, against the cluster.
examples() { # name log command...: runs it (its summary shown); a failure fails the caller's check
  "${@:3}" >"$work/$2" 2>&1 || { tail -40 "$work/$2"; return 1; }
  grep -E '[0-9]+ passed|[0-9]+ runs,|^[^ ]+ (pass|fail|skipped) [0-9]+$' "$work/$2" | sed 's/^/    | /'
}
check "README.md's lease example, docs/leases.md and docs/leader-election.md (psql, as written)" \
  examples sql sql.log env -C "$repo/pg_test/leases" ADVLOCK_PGHOST=127.0.0.1 ADVLOCK_PGPORT="$port" \
  ADVLOCK_PGDATABASE=advlock PGBIN="$pgbin" "$repo/pg_test/.venv/bin/python" -m pytest -q -p no:cacheprovider \
  test_doc_examples.py -k test_lease_doc_examples
# Every example of each client README (the lease and election ones run: the cluster is preloaded).
# (pytest: "2 skipped"; minitest: "2 skips"; node --test: "skipped 2")
no_skips() { ! grep -qE '[1-9][0-9]* skip(ped|s)|skipped [1-9]' "$work/$1" || { grep -iE 'skip' "$work/$1" | head; return 1; }; }
check "clients/python/README.md's examples" \
  examples python python.log env ADVLOCK_PY_DSN="$dsn" "$repo/clients/python/.venv/bin/python" -m pytest -q -rs \
  -p no:cacheprovider "$repo/clients/python/tests/test_readme.py"
check "... none skipped" no_skips python.log
check "clients/ruby/README.md's examples" \
  examples ruby ruby.log env -C "$repo/clients/ruby" ADVLOCK_RB_DSN="$dsn" ruby -Ilib -Itest test/readme_test.rb
check "... none skipped" no_skips ruby.log
node_readme() { # the package as its README's examples import it (clients/node/run_tests.sh: packed)
  local node=$repo/clients/node tgz
  mkdir -p "$work/node/readme/node_modules/advlock" &&
    tgz=$(cd "$node" && npm pack --silent --pack-destination "$work/node" | tail -1) &&
    tar -xzf "$work/node/$tgz" -C "$work/node/readme/node_modules/advlock" --strip-components=1 &&
    ln -s "$node/node_modules/pg" "$node/node_modules/postgres" "$work/node/readme/node_modules/" &&
    (cd "$node" && ADVLOCK_NODE_DSN="$dsn" ADVLOCK_NODE_README_DIR="$work/node/readme" \
      node --test --test-reporter=spec build/test/readme.test.js)
}
check "clients/node/README.md's examples" examples node node.log node_readme
check "... none skipped" no_skips node.log

echo "up: $passed passed, $failed failed"
echo "up $passed $failed" >>"$summary"
[ "$failed" -eq 0 ]
