#!/usr/bin/env bash
# edition-move: the documented move from the SQL edition to the extension
# (edition/move_to_extension.sql, docs/sql-edition.md, "Moving to the extension"), on a database that uses
# advlock_key in a stored generated column with an index on it and in an expression index.
# Checks that the move keeps the table, both indexes and every stored key, that new rows get
# the same keys, that amcheck finds the indexes consistent (where contrib's amcheck exists),
# and -- on PostgreSQL 17+, which has ALTER COLUMN ... SET EXPRESSION -- the rebinding to the
# extension's function and the final cleanup. Usage (from run.sh): move.sh WORKDIR PORT
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$(dirname "$here")")"
. "$here/../instance.sh"
work=$1 port=$2
db=edition_move
# shellcheck disable=SC2034  # read by psql_db (scripts/helpers.sh): the database it connects to
psql_dbname=$db
passed=0 failed=0
check() { # name sql-returning-t
  local got; got=$(psql_db -Atc "$2" 2>&1)
  if [ "$got" = t ]; then passed=$((passed + 1)); echo "move: ok   $1"
  else failed=$((failed + 1)); echo "move: FAIL $1: got '$got'"; fi
}
step() { # name sql... (via psql -c each)
  local args=() s; for s in "${@:2}"; do args+=(-c "$s"); done
  if psql_db "${args[@]}" >"$work/move-step.log" 2>&1; then passed=$((passed + 1)); echo "move: ok   $1"
  else failed=$((failed + 1)); echo "move: FAIL $1:"; cat "$work/move-step.log"; fi
}

as_postgres "$PGBIN/psql" -X -q -h "$work" -p "$port" -U postgres -d postgres -c "CREATE DATABASE $db" || exit 1
PGOPTIONS='-c search_path=public' psql_db -f "$work/advlock_sql.sql" >/dev/null || exit 1
cp "$repo/edition/move_to_extension.sql" "$work/"; chmod 644 "$work/move_to_extension.sql"

step "a table using the edition's advlock_key (generated column, index, expression index)" \
  "CREATE TABLE jobs (queue text NOT NULL, job_id bigint NOT NULL,
                      lock_key bigint GENERATED ALWAYS AS (advlock_key(queue, job_id)) STORED)" \
  "CREATE INDEX jobs_lock_key ON jobs (lock_key)" \
  "CREATE INDEX jobs_key_expr ON jobs (advlock_key(queue, job_id::text))" \
  "INSERT INTO jobs SELECT 'q' || (g % 7), g FROM generate_series(1, 3000) g" \
  "CREATE TABLE keys_before AS SELECT job_id, lock_key FROM jobs"

step "fencing tokens drawn from the edition" \
  "CREATE TABLE tokens_before AS SELECT advlock_try_with_token(g, 0) AS token FROM generate_series(1, 40) g" \
  "SELECT pg_advisory_unlock_all()"

step "fences passed in the edition" \
  "SELECT advlock_fence('invoices', 'march', 42), advlock_fence(12345, 7)" \
  "CREATE TABLE fences_before AS SELECT * FROM advlock_fences"

# The move itself, as the README says to run it.
if PGOPTIONS='-c search_path=public' psql_db -f "$work/move_to_extension.sql" >"$work/move.log" 2>&1; then
  passed=$((passed + 1)); echo "move: ok   move_to_extension.sql"; cat "$work/move.log"
else
  failed=$((failed + 1)); echo "move: FAIL move_to_extension.sql:"; cat "$work/move.log"
fi

check "the extension is installed" "SELECT count(*) = 1 FROM pg_extension WHERE extname = 'advlock'"
check "advlock_key now resolves to the extension's (a C function)" \
  "SELECT bool_and(l.lanname = 'c') FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang WHERE p.proname = 'advlock_key'"
check "no object of the edition left but the renamed key functions and their helpers" \
  "SELECT array_agg(proname::text ORDER BY proname) = '{advlock_edition_check_target,advlock_edition_key,advlock_edition_key,advlock_edition_key,advlock_edition_siphash24}'
     FROM pg_proc WHERE proname LIKE 'advlock\_edition\_%'"
check "every stored key unchanged" \
  "SELECT count(*) = 3000 FROM jobs j JOIN keys_before b USING (job_id) WHERE j.lock_key = b.lock_key"
check "every stored key equals the extension's advlock_key" \
  "SELECT count(*) = 0 FROM jobs WHERE lock_key <> advlock_key(queue, job_id)"
check "the extension's fencing tokens continue above the edition's" \
  "SELECT advlock_try_with_token(1, 0) > (SELECT max(token) FROM tokens_before) AND advlock_unlock(1)"
check "every fence moved to the extension's advlock_fences, as it was" \
  "SELECT (SELECT count(*) FROM advlock_fences) = 2
      AND NOT EXISTS (SELECT * FROM advlock_fences EXCEPT SELECT * FROM fences_before)
      AND EXISTS (SELECT FROM pg_depend WHERE objid = 'advlock_fences'::regclass AND deptype = 'e'
                     AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'advlock'))"
check "a moved fence still refuses a smaller token (LK001), passes a larger one" \
  "DO \$\$ BEGIN PERFORM advlock_fence('invoices', 'march', 41); RAISE 'passed'; EXCEPTION WHEN SQLSTATE 'LK001' THEN NULL; END \$\$;
   SELECT true FROM advlock_fence('invoices', 'march', 43)"
step "new rows after the move" "INSERT INTO jobs SELECT 'q' || (g % 7), g FROM generate_series(3001, 3500) g"
check "new rows get the extension's keys" \
  "SELECT count(*) = 500 FROM jobs WHERE job_id > 3000 AND lock_key = advlock_key(queue, job_id)"
check "the index on the stored keys finds a row" \
  "SET enable_seqscan = off; SELECT count(*) = 1 FROM jobs WHERE lock_key = advlock_key('q2', 3005)"
check "the old expression index is still maintained (lookup through the renamed function)" \
  "SET enable_seqscan = off; SELECT count(*) = 1 FROM jobs WHERE advlock_edition_key(queue, job_id::text) = advlock_key('q3', 3)"
if [ -f "$("$PG_CONFIG" --sharedir)/extension/amcheck.control" ]; then
  step "CREATE EXTENSION amcheck" "CREATE EXTENSION IF NOT EXISTS amcheck"
  check "amcheck: both indexes consistent with the heap (bt_index_check, heapallindexed)" \
    "SELECT bt_index_check('jobs_lock_key', true)::text = '' AND bt_index_check('jobs_key_expr', true)::text = ''"
else
  echo "move: amcheck is not available in PostgreSQL $ADVLOCK_PG_MAJOR here: REINDEX and compare instead"
  check "REINDEX gives the same lookups" \
    "REINDEX TABLE jobs; SET enable_seqscan = off; SELECT count(*) = 3500 FROM jobs j LEFT JOIN keys_before b USING (job_id) WHERE (j.lock_key = b.lock_key AND j.lock_key = advlock_key(j.queue, j.job_id)) OR j.job_id > 3000"
fi

if [ "$("$PGBIN/postgres" --version | sed 's/[^0-9]*\([0-9]*\).*/\1/')" -ge 17 ]; then
  # Rebinding to the extension's function (the README's optional last step).
  step "rebind the generated column (PostgreSQL 17+: SET EXPRESSION) and the expression index" \
    "ALTER TABLE jobs ALTER COLUMN lock_key SET EXPRESSION AS (advlock_key(queue, job_id))" \
    "CREATE INDEX jobs_key_expr2 ON jobs (advlock_key(queue, job_id::text))" \
    "DROP INDEX jobs_key_expr" \
    "DROP FUNCTION advlock_edition_key(text, text), advlock_edition_key(text, bigint), advlock_edition_key(text)" \
    "DROP FUNCTION advlock_edition_siphash24(bytea), advlock_edition_check_target(text, text, boolean)"
  check "after rebinding: every stored key unchanged" \
    "SELECT count(*) = 3000 FROM jobs j JOIN keys_before b USING (job_id) WHERE j.lock_key = b.lock_key"
  check "after rebinding: the new expression index is used with the extension's function" \
    "SET enable_seqscan = off; SELECT count(*) = 1 FROM jobs WHERE advlock_key(queue, job_id::text) = advlock_key('q3', 3)"
else
  echo "move: PostgreSQL $ADVLOCK_PG_MAJOR has no ALTER COLUMN ... SET EXPRESSION: the generated column stays bound to advlock_edition_key (README)"
fi
echo "move: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
