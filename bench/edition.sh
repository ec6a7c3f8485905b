#!/usr/bin/env bash
# The SQL edition against the extension, side by side in one run on one server: key derivation
# and the uncontended acquire. A standalone script (not a bench/run.sh case): it needs the
# extension installed in the major it runs on, and two databases, one per implementation.
#
#   bench/edition.sh [--quick] [--out DIR]     (ADVLOCK_PG_MAJOR / ADVLOCK_PG_CONFIG pick the server)
#
# 1. keys: SELECT bit_xor(advlock_key(ns, id)) over N generated pairs (100 namespaces), minus
#    the same scan without the function, median of R interleaved rounds: net time per key.
# 2. acquire, server side: a DO block calling advlock_try_with_timeout(key, 0) (xact scope, a
#    pure try; re-entrant on one key) M times inside one transaction: time per call.
# 3. acquire, client side: pgbench, 1 client, BEGIN; SELECT advlock_try_with_timeout(k, 0);
#    COMMIT with a random key, simple protocol, T seconds per round, interleaved rounds:
#    transactions per second (the round trip and transaction dominate here).
# Writes DIR/REPORT.md (default bench/results/edition) and prints it.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
. "$repo/pg_test/instance.sh"
quick=0 out=$here/results/edition port=${ADVLOCK_BENCH_PORT:-5482}
while [ $# -gt 0 ]; do
  case $1 in --quick) quick=1 ;; --out) out=$2; shift ;; --port) port=$2; shift ;; *) echo "unknown $1" >&2; exit 2 ;; esac
  shift
done
if [ $quick = 1 ]; then N=20000 R=3 M=2000 T=2; else N=200000 R=7 M=50000 T=10; fi
[ -f "$("$PG_CONFIG" --sharedir)/extension/advlock.control" ] ||
  { echo "bench/edition: the extension is not installed in PostgreSQL $ADVLOCK_PG_MAJOR ($PG_CONFIG)" >&2; exit 1; }
work=$(mktemp -d /tmp/advlock-bench-edition.XXXXXX)
chmod 755 "$work"; chown postgres "$work"
trap 'instance_stop "$work"; rm -rf "$work"' EXIT
instance_start "$work" "$port" 'jit = off' 'max_parallel_workers_per_gather = 0' 'autovacuum = off' 'synchronous_commit = off' ||
  { echo "bench/edition: could not start PostgreSQL" >&2; exit 1; }
cp "$repo/edition/advlock_sql.sql" "$work/"; chmod 644 "$work/advlock_sql.sql"
q() { as_postgres "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$work" -p "$port" -U postgres "$@"; }
q -d postgres -c "CREATE DATABASE bench_ext" -c "CREATE DATABASE bench_sql" || exit 1
q -d bench_ext -c "CREATE EXTENSION advlock SCHEMA public" || exit 1
PGOPTIONS='-c search_path=public' q -d bench_sql -f "$work/advlock_sql.sql" >/dev/null || exit 1
for db in bench_ext bench_sql; do
  q -d "$db" -c "CREATE UNLOGGED TABLE pairs AS SELECT 'ns' || (g % 100) AS ns, g::text AS id FROM generate_series(1, $N) g" \
    -c "VACUUM ANALYZE pairs" || exit 1
done
[ "$(q -d bench_ext -c 'SELECT bit_xor(advlock_key(ns, id)) FROM pairs')" = "$(q -d bench_sql -c 'SELECT bit_xor(advlock_key(ns, id)) FROM pairs')" ] ||
  { echo "bench/edition: the two implementations disagree on the keys" >&2; exit 1; }

# ms DB SQL: server-side elapsed milliseconds of one statement (clock_timestamp around it).
ms() {
  q -d "$1" -c "DO \$\$ DECLARE t timestamptz := clock_timestamp(); BEGIN $2; RAISE NOTICE 'ms=%', extract(epoch FROM clock_timestamp() - t) * 1000; END \$\$" 2>&1 |
    sed -n 's/.*ms=\([0-9.]*\).*/\1/p'
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
declare -A keys_net acq tps
for db in bench_ext bench_sql; do : >"$work/$db.keys"; : >"$work/$db.acq"; : >"$work/$db.tps"; done
cat >"$work/acquire.sql" <<'SQL'
\set k random(1, 1000000)
BEGIN;
SELECT advlock_try_with_timeout(:k, 0);
COMMIT;
SQL
chmod 644 "$work/acquire.sql"
for round in $(seq "$R"); do
  for db in bench_ext bench_sql; do
    base=$(ms "$db" "PERFORM bit_xor(length(ns) + length(id)) FROM pairs")
    with=$(ms "$db" "PERFORM bit_xor(advlock_key(ns, id)) FROM pairs")
    awk -v a="$with" -v b="$base" -v n="$N" 'BEGIN { printf "%.4f\n", (a - b) * 1e6 / n }' >>"$work/$db.keys"   # ns per key
    a=$(q -d "$db" -c "BEGIN; DO \$\$ DECLARE t timestamptz := clock_timestamp(); BEGIN FOR i IN 1..$M LOOP PERFORM advlock_try_with_timeout(42::bigint, 0); END LOOP; RAISE NOTICE 'ms=%', extract(epoch FROM clock_timestamp() - t) * 1000; END \$\$; COMMIT;" 2>&1 |
        sed -n 's/.*ms=\([0-9.]*\).*/\1/p')
    awk -v a="$a" -v m="$M" 'BEGIN { printf "%.4f\n", a * 1000 / m }' >>"$work/$db.acq"   # µs per call
    as_postgres "$PGBIN/pgbench" -n -h "$work" -p "$port" -U postgres -c 1 -T "$T" -f "$work/acquire.sql" "$db" 2>/dev/null |
      sed -n 's/^tps = \([0-9.]*\).*/\1/p' >>"$work/$db.tps"
  done
done
for db in bench_ext bench_sql; do
  keys_net[$db]=$(median <"$work/$db.keys"); acq[$db]=$(median <"$work/$db.acq"); tps[$db]=$(median <"$work/$db.tps")
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", a / b }'; }
ratio2() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
mkdir -p "$out"
version=$("$PGBIN/postgres" --version)
{
  echo "# SQL edition vs extension"
  echo
  echo "$version, $(nproc) cores, $(date -u +%Y-%m-%d); $([ $quick = 1 ] && echo 'quick mode (tiny sizes, not a measurement)' || echo 'full sizes'):"
  echo "keys over $N pairs, $R interleaved rounds; server-side acquire $M calls per round; pgbench ${T} s per round. Medians."
  echo
  echo "| what | extension | SQL edition | edition slower by |"
  echo "| --- | ---: | ---: | ---: |"
  echo "| \`advlock_key(ns, id)\`, net per key (server) | ${keys_net[bench_ext]} ns | ${keys_net[bench_sql]} ns | $(ratio "${keys_net[bench_sql]}" "${keys_net[bench_ext]}")× |"
  echo "| \`advlock_try_with_timeout(key, 0)\` in a transaction, per call (server) | ${acq[bench_ext]} µs | ${acq[bench_sql]} µs | $(ratio2 "${acq[bench_sql]}" "${acq[bench_ext]}")× |"
  echo "| client \`BEGIN; SELECT advlock_try_with_timeout(k, 0); COMMIT\`, pgbench 1 client | ${tps[bench_ext]} tps | ${tps[bench_sql]} tps | $(ratio2 "${tps[bench_ext]}" "${tps[bench_sql]}")× |"
  echo
  echo "Raw rounds: keys ns/key ext [$(paste -sd' ' "$work/bench_ext.keys")] sql [$(paste -sd' ' "$work/bench_sql.keys")];"
  echo "acquire µs/call ext [$(paste -sd' ' "$work/bench_ext.acq")] sql [$(paste -sd' ' "$work/bench_sql.acq")];"
  echo "pgbench tps ext [$(paste -sd' ' "$work/bench_ext.tps")] sql [$(paste -sd' ' "$work/bench_sql.tps")]."
} >"$out/REPORT.md"
cat "$out/REPORT.md"
