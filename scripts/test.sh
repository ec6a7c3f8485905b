#!/usr/bin/env bash
# advlock's test command: installs what is missing (scripts/setup.sh), then runs every suite
#   1. cargo pgrx test pg17          in-database #[pg_test]s and Rust unit tests
#      (preloaded, then again with ADVLOCK_PGRX_PRELOAD=off)
#   2. pg_test/run.sh                pg_regress, pg_isolation_regress, real clients + PgBouncer;
#      regress + isolation again with shared_preload_libraries = 'advlock', and regress once
#      more with tiny label/namespace capacities (full tables)
#   3. docs/keys/verify/run.sh       the client key snippets against the vectors (toolchains present)
#   4. bench/run.sh --quick          the benchmark harness at tiny sizes, so it never rots
# and prints one closing line: "advlock: N passed, M failed". Exits non-zero on any failure.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
cd "$repo"
export PATH="$HOME/.cargo/bin:$PATH"
PG_CONFIG=/usr/lib/postgresql/17/bin/pg_config

"$here/setup.sh" || { echo "advlock: 0 passed, 1 failed"; exit 1; }

summary=$(mktemp /tmp/advlock-summary.XXXXXX)
export ADVLOCK_SUMMARY=$summary
status=0
section() { printf '\n\033[1m== %s ==\033[0m\n' "$*"; }

section "cargo pgrx test pg17"
runas=()
if [ "$(id -u)" = 0 ]; then
  # initdb refuses root: run the test cluster as `postgres` in a directory it owns.
  pgdata=/tmp/advlock-pgrx-test
  mkdir -p "$pgdata"; chown postgres "$pgdata"
  runas=(--runas postgres --pgdata "$pgdata/data")
fi
log=$(mktemp /tmp/advlock-pgrx-test.XXXXXX.log)
# pgrx_pass NAME: one `cargo pgrx test` run, counted as NAME in the summary.
pgrx_pass() {
  cargo pgrx test pg17 "${runas[@]}" 2>&1 | tee "$log" | grep -E '^test |^test result:|panicked|^error' || true
  local rc=${PIPESTATUS[0]} p f
  read -r p f < <(awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
                      END { print p + 0, f + 0 }' "$log")
  if [ "$rc" -ne 0 ]; then
    status=1; [ "$f" -gt 0 ] || f=1
    grep -E 'Client Error|left:|right:|ERROR' -A3 "$log" | head -60
  fi
  echo "$1 $p $f" >>"$summary"
}
pgrx_pass pgrx                                  # advlock preloaded (src/lib.rs pg_test options)
section "cargo pgrx test pg17, not preloaded"
ADVLOCK_PGRX_PRELOAD=off pgrx_pass pgrx-nopre

section "install the extension into PostgreSQL 17"
if cargo pgrx install --pg-config "$PG_CONFIG" >"$log" 2>&1; then
  section "pg_test suites"
  "$repo/pg_test/run.sh" || status=1
  # Labels and statistics need shared_preload_libraries; the same specs and regress files
  # expect their other output (name_1.out) there. Counted as preload-regress etc.
  presummary=$(mktemp /tmp/advlock-summary-preload.XXXXXX)
  section "pg_test suites, preloaded"
  ADVLOCK_SUMMARY=$presummary ADVLOCK_TEST_CONF="shared_preload_libraries = 'advlock'" \
    "$repo/pg_test/run.sh" regress isolation || status=1
  sed 's/^/preload-/' "$presummary" >>"$summary"; : >"$presummary"
  section "pg_test regress, preloaded with tiny capacities (full tables)"
  ADVLOCK_SUMMARY=$presummary ADVLOCK_TEST_CONF=$'shared_preload_libraries = \'advlock\'\nadvlock.max_labels = 2\nadvlock.max_namespaces = 2' \
    "$repo/pg_test/run.sh" regress || status=1
  sed 's/^/tiny-/' "$presummary" >>"$summary"
else
  tail -30 "$log"; echo "install 0 1" >>"$summary"; status=1
fi

section "client key snippets (docs/keys) against the vectors"
keylog=$(mktemp /tmp/advlock-keys.XXXXXX.log)
bash "$repo/docs/keys/verify/run.sh" 2>&1 | tee "$keylog"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
sed -n 's/^keys: \([0-9]*\) passed, \([0-9]*\) failed$/keys \1 \2/p' "$keylog" >>"$summary"
grep -q '^keys: ' "$keylog" || echo "keys 0 1" >>"$summary"

if [ -x "$repo/bench/run.sh" ]; then
  section "benchmark harness (--quick)"
  if ADVLOCK_BENCH_PORT=${ADVLOCK_BENCH_PORT:-5431} "$repo/bench/run.sh" --quick; then echo "bench-quick 1 0" >>"$summary"; else echo "bench-quick 0 1" >>"$summary"; status=1; fi
fi

section "summary"
awk '{ printf "  %-16s %5d passed, %d failed\n", $1, $2, $3; p += $2; f += $3 }
     END { printf "advlock: %d passed, %d failed\n", p, f }' "$summary"
awk '{ f += $3 } END { exit f > 0 }' "$summary" || status=1
exit $status
