#!/usr/bin/env bash
# Instructions per call of advlock's acquisition and key derivation, counted by callgrind in a
# single-user backend (deterministic for the same build and input: no clock, no scheduler), for two
# builds side by side in one run, with PostgreSQL's own pg_try_advisory_lock and hashtextextended
# as the yardsticks.
#
#   bench/instructions.sh BASE.so NEW.so     e.g. two `cargo pgrx package --out-dir` trees'
#                                            usr/lib/postgresql/17/lib/advlock.so
#
# Each statement runs N calls over distinct keys; its count minus a warm-up-only run's, over N,
# is one call's (one acquire plus its release; one key for hte, key_int and key_text). Each
# build's first backend is not counted: the first after the setup does one-off work (counted as
# the warm-up-only run's, it took about 3 instructions off each of the base's per-call figures).
# The builds take turns as advlock.so of a private copy of PostgreSQL 17's tree (scripts/majors.sh:
# copy_pg_tree), with the extension's SQL files of the test command's tree of 17 (what
# scripts/install_ext.sh installed there): nothing outside the copy is touched.
# Needs valgrind; runs as root (the backend runs as postgres). Not run by the test command.
set -euo pipefail
[ $# -eq 2 ] || { sed -n 2,16p "$0"; exit 2; }
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../scripts/majors.sh"
work=$(mktemp -d /tmp/advlock-instructions.XXXXXX); chown postgres "$work"
trap 'rm -rf "$work"' EXIT
copy_pg_tree 17 "$work/tree"
pgc=$(copied_pg_config 17 "$work/tree") installed=$(test_pg_config_for 17)
bin=$("$pgc" --bindir) lib=$("$pgc" --pkglibdir)
cp "$("$installed" --sharedir)"/extension/advlock{.control,--*.sql} "$("$pgc" --sharedir)/extension/" ||
  { echo "instructions: no advlock SQL files in $("$installed" --sharedir)/extension (scripts/install_ext.sh installs them)" >&2; exit 1; }
put() { cp "$1" "$lib/advlock.so"; }
put "$2"   # CREATE EXTENSION loads the library
single() { sudo -u postgres "$bin/postgres" --single -D "$work/data" "$@"; }
sudo -u postgres "$bin/initdb" -D "$work/data" >/dev/null
echo "CREATE DATABASE bench" | single postgres >/dev/null
printf 'CREATE EXTENSION advlock\n' | single bench >/dev/null

N=20000
series="generate_series(1::bigint, $N) g"
warm="SELECT count(*) FROM generate_series(1::bigint, 100) g WHERE advlock_try_with_timeout(g, 0, 'session') AND advlock_unlock(g) AND advlock_try_with_timeout('bench', g, 0, 'session') AND advlock_unlock('bench', g) AND advlock_try_all_with_timeout(ARRAY[g, g+1000000, g+2000000], 0, 'session') AND advlock_unlock_all(ARRAY[g, g+1000000, g+2000000]) AND pg_try_advisory_lock(g) AND pg_advisory_unlock(g) AND advlock_key('bench', g) # advlock_key('bench', g::text) # hashtextextended('bench' || ':' || g, 0) <> 0"
names=(builtin key ns key_set_of_3 hte key_int key_text)
declare -A sql=(
  [builtin]="SELECT count(*) FROM $series WHERE pg_try_advisory_lock(g) AND pg_advisory_unlock(g)"
  [key]="SELECT count(*) FROM $series WHERE advlock_try_with_timeout(g, 200, 'session') AND advlock_unlock(g)"
  [ns]="SELECT count(*) FROM $series WHERE advlock_try_with_timeout('bench', g, 200, 'session') AND advlock_unlock('bench', g)"
  [hte]="SELECT count(*) FROM $series WHERE hashtextextended('bench' || ':' || g, 0) <> 0"
  [key_int]="SELECT count(*) FROM $series WHERE advlock_key('bench', g) <> 0"
  [key_text]="SELECT count(*) FROM $series WHERE advlock_key('bench', g::text) <> 0"
  [key_set_of_3]="SELECT count(*) FROM $series WHERE advlock_try_all_with_timeout(ARRAY[g, g+1000000, g+2000000], 200, 'session') AND advlock_unlock_all(ARRAY[g, g+1000000, g+2000000])"
)
instructions() { # statements... -> total instructions of the backend
  printf '%s\n' "$@" | sudo -u postgres valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" -q \
    "$bin/postgres" --single -D "$work/data" bench >/dev/null 2>&1
  awk '/^summary:/ { print $2 }' "$work/cg.out"
}
declare -A per
for build in base new; do
  if [ $build = base ]; then put "$1"; else put "$2"; fi
  instructions "$warm" >/dev/null
  warm_total=$(instructions "$warm")
  for name in "${names[@]}"; do
    per[$build.$name]=$(( ($(instructions "$warm" "${sql[$name]}") - warm_total) / N ))
  done
done
echo "instructions per call (a lock row: acquire + release; hte, key_int, key_text: one key)," \
  "$N calls, PostgreSQL 17, callgrind"
printf '| %s | %s | %s | %s |\n' "call" "base" "new" "new / base"
printf '| --- | ---: | ---: | ---: |\n'
for name in "${names[@]}"; do
  b=${per[base.$name]} n=${per[new.$name]}
  printf '| %s | %d | %d | %s |\n' "$name" "$b" "$n" "$(python3 -c "print(f'{$n/$b:.3f}')")"
done
