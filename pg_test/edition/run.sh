#!/usr/bin/env bash
# Runs advlock's suites against the SQL edition (edition/advlock_sql.sql) on a throwaway
# PostgreSQL of ADVLOCK_PG_MAJOR, in databases where the extension is NOT installed:
#   edition-build       the committed edition/advlock_sql.sql is the build of its sources
#   edition-install     psql -f into a fresh database, twice (re-running upgrades in place)
#   edition-regress     pg_test/regress, the extension's own files (see "Overlays" below)
#   edition-isolation   pg_test/isolation, likewise
#   edition-vectors     pg_test/vectors + random keys against the Python reference (vectors.py)
#   edition-race        the grant-vs-timeout race stress of pg_test/reliability (race.py)
#   edition-keysets     the multi-key stress of pg_test/reliability (test_multikey_stress.py, as is)
#   edition-signatures  where the extension is installed in this major: the edition's functions
#                       and view have exactly the extension's signatures, defaults, volatility,
#                       parallel safety and strictness (compared in two databases)
#   edition-move        where the extension is installed: the documented move from the
#                       edition to the extension (move.sh), generated column and indexes kept
#   edition-readme      the SQL edition examples of README.md and docs/sql-edition.md, run as written
# Suites that need the library (preload*, settings*, stats_*; leases, lease-* and cic-wait: the
# edition has no leases and no snapshot-free waits; lock_table: nor the lock table view) are
# skipped, each skip printed and recorded. Writes "suite passed failed" lines to $ADVLOCK_SUMMARY.
#
# Overlays: the same expected files as the extension, except where the edition differs in a
# documented way (docs/sql-edition.md): pg_test/edition/expected/*.out
# replaces the extension's file of that name in a temporary copy of the input directory. And
# the edition's errors come from PL/pgSQL, which adds a CONTEXT line the extension's do not
# have: psql runs with SHOW_CONTEXT=never and CONTEXT lines are dropped from the copied
# expected files (the extension's plpgsql helpers have them too). An overlay is copied after
# that, as it is: a test that shows CONTEXT itself (fence_errors, fence-errors: the statement
# that raised, and in the edition the PL/pgSQL function's line) has an overlay with the
# edition's CONTEXT.
#
# Usage: pg_test/edition/run.sh [build install regress isolation vectors race keysets signatures move readme]
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tests="$(dirname "$here")"
repo="$(dirname "$tests")"
# shellcheck source=../instance.sh
. "$tests/instance.sh"

suites=("$@"); [ ${#suites[@]} -gt 0 ] || suites=(build install regress isolation vectors race keysets signatures move readme)
port=${ADVLOCK_EDITION_PORT:-5481}
summary=${ADVLOCK_SUMMARY:-/dev/null}
venv=${ADVLOCK_VENV:-$tests/.venv}
edition="$repo/edition/advlock_sql.sql"
work=$(mktemp -d /tmp/advlock-edition.XXXXXX)
chmod 755 "$work"; chown postgres "$work"
cp "$edition" "$work/advlock_sql.sql"; chmod 644 "$work/advlock_sql.sql"

trap 'instance_stop "$work"' EXIT
instance_start "$work" "$port" || { echo "edition: could not start PostgreSQL $ADVLOCK_PG_MAJOR"; echo "edition-setup 0 1" >>"$summary"; exit 1; }
echo "edition: PostgreSQL $ADVLOCK_PG_MAJOR on port $port, data in $work/data"
status=0
ext_control="$("$PG_CONFIG" --sharedir)/extension/advlock.control"

record() { # suite passed failed [note]
  echo "$*" >>"$summary"; echo "edition: $1: $2 passed, $3 failed${4:+ ($4)}"
  [ "$3" -eq 0 ] || status=1
}
# new_edition_db NAME: a database with the edition in schema public and no extension.
new_edition_db() {
  { psql_db -d postgres -c "CREATE DATABASE $1" &&
    PGOPTIONS='-c search_path=public' psql_db -d "$1" -f "$work/advlock_sql.sql" >"$work/install-$1.log" 2>&1; } ||
    { cat "$work/install-$1.log"; return 1; }
}

# The drivers call $bindir/psql: a wrapper adds SHOW_CONTEXT=never (see Overlays).
mkdir -p "$work/bin"
printf '#!/bin/sh\nexec "%s/psql" -v SHOW_CONTEXT=never "$@"\n' "$PGBIN" >"$work/bin/psql"
chmod 755 "$work/bin" "$work/bin/psql"

# input_copy KIND: pg_test/KIND without CONTEXT lines, then with the edition's overlays (as
# they are: their CONTEXT lines are the edition's).
input_copy() {
  local kind=$1 dir="$work/$1-input" f
  cp -r "$tests/$kind" "$dir"
  sed -i '/^CONTEXT:  /d' "$dir"/expected/*.out
  for f in "$here/expected"/*.out; do
    [ -f "$f" ] || continue
    if [ -f "$dir/expected/$(basename "$f")" ]; then cp "$f" "$dir/expected/"; fi
  done
  chown -R postgres "$dir"
  echo "$dir"
}

run_driver() { # suite driver kind db tests...
  local suite=$1 driver=$2 kind=$3 db=$4; shift 4
  local input; input=$(input_copy "$kind")
  mkdir -p "$work/$suite"; chown postgres "$work/$suite"
  new_edition_db "$db" || { record "$suite" 0 1 "install failed"; return; }
  as_postgres "$driver" --bindir="$work/bin" --host="$work" --port="$port" --user=postgres \
    --use-existing --dbname="$db" --inputdir="$input" --outputdir="$work/$suite" "$@" >"$work/$suite.log" 2>&1
  local rc=$?
  cat "$work/$suite.log"
  if [ $rc -ne 0 ] && ! grep -qE '^not ok [0-9]+|\.\.\. FAILED' "$work/$suite.log"; then
    record "$suite" 0 1 "driver failed"
  else
    local passed failed
    read -r passed failed < <(count_tap "$work/$suite.log")
    record "$suite" "$passed" "$failed"
  fi
  if [ $rc -ne 0 ]; then
    status=1
    [ -f "$work/$suite/regression.diffs" ] && head -200 "$work/$suite/regression.diffs"
  fi
}

# needs_preload NAME: suites that exist only with shared_preload_libraries (or check settings,
# which only the library can), or test what only the library has (lock_table).
# (election*: leader election lives in the lease table, shared memory of the preloaded library.)
needs_preload() { case $1 in preload*|settings|settings_*|stats_*|leases|lease-*|election|election-*|cic-wait|lock_table) return 0 ;; *) return 1 ;; esac; }

run_python() { # suite script
  local suite=$1 script=$2
  local db=${suite//-/_}
  new_edition_db "$db" || { record "$suite" 0 1 "install failed"; return; }
  ADVLOCK_PGHOST=127.0.0.1 ADVLOCK_PGPORT=$port ADVLOCK_PGDATABASE=$db \
    "$venv/bin/python" "$here/$script" 2>&1 | tee "$work/$suite.log"
  record_log "$suite" "${PIPESTATUS[0]}"
}

# record_log SUITE RC: a script that counts its checks ("name: N passed, M failed", last line
# of that form in $work/SUITE.log) is recorded with its counts, else as one test.
record_log() {
  local suite=$1 rc=$2 counts p f
  counts=$(sed -n 's/^[a-z]*: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' "$work/$suite.log" | tail -1)
  if [ -n "$counts" ]; then
    read -r p f <<<"$counts"
    [ "$rc" -eq 0 ] || [ "$f" -gt 0 ] || f=1
    record "$suite" "$p" "$f"
  elif [ "$rc" -eq 0 ]; then record "$suite" 1 0; else record "$suite" 0 1; fi
}

for suite in "${suites[@]}"; do
  case $suite in
    build)
      if "$repo/scripts/build_edition.sh" --check; then record edition-build 1 0; else record edition-build 0 1; fi ;;
    install)
      # Twice into one database: the second run is the upgrade path (CREATE OR REPLACE).
      if new_edition_db edition_install &&
         PGOPTIONS='-c search_path=public' psql_db -d edition_install -f "$work/advlock_sql.sql" >>"$work/install.log" 2>&1 &&
         [ "$(psql_db -d edition_install -Atc "SELECT advlock_key('rollup', 'nightly')")" = 2132624222628149741 ]; then
        record edition-install 1 0
      else
        cat "$work/install.log" 2>/dev/null; record edition-install 0 1
      fi ;;
    regress)
      all=(); for f in "$tests"/regress/sql/*.sql; do all+=("$(basename "$f" .sql)"); done
      run=()
      for t in "${all[@]}"; do
        if needs_preload "$t"; then
          echo "edition: regress: SKIPPED $t: needs the extension's library (preload or settings)"
          echo "edition-regress-skipped 0 0 $t" >>"$summary"
        else run+=("$t"); fi
      done
      run_driver edition-regress "$PGXS_TEST/regress/pg_regress" regress edition_regress "${run[@]}" ;;
    isolation)
      all=(); for f in "$tests"/isolation/specs/*.spec; do all+=("$(basename "$f" .spec)"); done
      run=()
      for t in "${all[@]}"; do
        needs=$(sed -n '1s/^# requires-extension: *//p' "$tests/isolation/specs/$t.spec")
        if needs_preload "$t"; then
          echo "edition: isolation: SKIPPED $t: needs the extension's library preloaded"
          echo "edition-isolation-skipped 0 0 $t" >>"$summary"
        elif [ -n "$needs" ] && [ ! -f "$("$PG_CONFIG" --sharedir)/extension/$needs.control" ]; then
          echo "edition: isolation: SKIPPED $t: needs extension $needs, which PostgreSQL $ADVLOCK_PG_MAJOR here does not have"
          echo "edition-isolation-skipped 0 0 $t" >>"$summary"
        else run+=("$t"); fi
      done
      run_driver edition-isolation "$PGXS_TEST/isolation/pg_isolation_regress" isolation edition_isolation "${run[@]}" ;;
    vectors) run_python edition-vectors vectors.py ;;
    race)    run_python edition-race race.py ;;
    keysets)
      # The extension's multi-key stress file, unchanged, against a database with the edition:
      # 16 clients x random key sets, 0 deadlocks, 0 exclusion violations, never false while
      # holding, nothing left held; and its focused give-back and control tests.
      if new_edition_db edition_keysets; then
        (cd "$tests/reliability" && ADVLOCK_PGHOST=127.0.0.1 ADVLOCK_PGPORT=$port ADVLOCK_PGDATABASE=edition_keysets \
          "$venv/bin/python" -m pytest -q -p no:cacheprovider -s test_multikey_stress.py 2>&1 | tee "$work/edition-keysets.log")
        rc=${PIPESTATUS[0]}
        p=$(grep -oE '[0-9]+ passed' "$work/edition-keysets.log" | tail -1 | grep -oE '[0-9]+'); p=${p:-0}
        f=$(grep -oE '[0-9]+ (failed|error)' "$work/edition-keysets.log" | awk '{ n += $1 } END { print n + 0 }')
        [ "$rc" -eq 0 ] || [ "$f" -gt 0 ] || f=1
        record edition-keysets "$p" "$f"
      else
        record edition-keysets 0 1 "install failed"
      fi ;;
    signatures|move)
      if [ ! -f "$ext_control" ]; then
        echo "edition: $suite: SKIPPED: the advlock extension is not installed in PostgreSQL $ADVLOCK_PG_MAJOR here"
        echo "edition-$suite-skipped 0 0 extension not installed" >>"$summary"
        continue
      fi
      # The test command installs this checkout's build into the default major only, just before;
      # what another major holds may be any other build. ADVLOCK_EDITION_COMPARE=1 compares
      # there too (after installing this build into it).
      if [ "$ADVLOCK_PG_MAJOR" != "$ADVLOCK_DEFAULT_MAJOR" ] && [ -z "${ADVLOCK_EDITION_COMPARE:-}" ]; then
        echo "edition: $suite: SKIPPED: PostgreSQL $ADVLOCK_PG_MAJOR's extension is not known to be this build (only $ADVLOCK_DEFAULT_MAJOR's is installed by the test command; ADVLOCK_EDITION_COMPARE=1 compares anyway)"
        echo "edition-$suite-skipped 0 0 not this build" >>"$summary"
        continue
      fi
      "$here/$suite.sh" "$work" "$port" 2>&1 | tee "$work/edition-$suite.log"
      record_log "edition-$suite" "${PIPESTATUS[0]}" ;;
    readme)
      "$here/readme.sh" "$work" "$port" 2>&1 | tee "$work/edition-readme.log"
      record_log edition-readme "${PIPESTATUS[0]}" ;;
    *) echo "edition: unknown suite $suite"; status=1 ;;
  esac
done

if [ $status -ne 0 ]; then
  echo "edition: server log tail ($work/postgres.log):"; tail -40 "$work/postgres.log"
fi
exit $status
