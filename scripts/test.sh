#!/usr/bin/env bash
# advlock's test command: installs what is missing (scripts/setup.sh), then runs every suite,
# in this order (DEFAULT: ADVLOCK_DEFAULT_MAJOR of scripts/majors.sh, 17). Every suite runs
# against the test command's private copies of the PostgreSQL trees (scripts/majors.sh,
# test_pg_config_for; `cargo pgrx test` through a PGRX_HOME naming them) or in debootstrapped
# Debian systems: nothing is installed into the system PostgreSQL, and a server running from it
# (scripts/up.sh's development cluster, a real one), preloaded or not, is left alone:
#   0. pg_test/bystander/run.sh start   a preloaded PostgreSQL DEFAULT from the system tree, a
#      session holding a lock; `check` at the very end: still answering, never restarted, the lock
#      held, the system advlock.so byte- and inode-identical, no system advlock file changed
#   1. scripts/lint.sh               first and fast: cargo fmt --check, clippy -D warnings,
#      ShellCheck, ruff, one version (scripts/versions.py), actionlint (counted as lint)
#   1b. pg_test/release/versions.sh  one version: versions.py and release.sh refuse a mismatch
#   2. cargo pgrx test pgDEFAULT     in-database #[pg_test]s and Rust unit tests
#      (preloaded, then again with ADVLOCK_PGRX_PRELOAD=off)
#   3. pg_test/run.sh                (after scripts/install_ext.sh into DEFAULT's test tree) pg_regress,
#      pg_isolation_regress, real clients + PgBouncer, leases, leases across crashes, restarts and
#      a standby's promotion (pg_test/failover: clusters of its own, always preloaded, so it runs
#      once), server encodings (pg_test/encodings:
#      UTF8, EUC_JP, LATIN1, WIN1251, SQL_ASCII databases); regress + isolation + leases again
#      with shared_preload_libraries = 'advlock', and regress once more with tiny label/namespace
#      capacities (full tables); the monitoring suite (promtool, a real postgres_exporter and
#      Prometheus) runs plain with the others, then again preloaded
#   3b. pg_test/failover/run.sh      leases, terms, semaphores and fences under a real Patroni
#      cluster (a Raft witness and two nodes, advlock preloaded): two switchovers and node loss
#      with clients on a multi-host DSN, then the killed node's rejoin (counted as patroni)
#   4. pg_test/fast_loop.sh          CONTRIBUTING.md's fast-loop commands, run as written
#      pg_test/install/run.sh        scripts/install_ext.sh replacing advlock.so under a running,
#      preloaded server (which keeps its mapped file and serves on)
#   5. docs/keys/verify/run.sh       the client key snippets against the vectors (toolchains present)
#   5b. clients/python/run_tests.sh  the Python client: ruff, mypy --strict, pytest on a real instance
#   5c. clients/ruby/run_tests.sh    the Ruby client: gem build, minitest on a real instance (extension,
#      SQL edition, preloaded; PgBouncer in every mode); its RuboCop runs in step 1
#   5d. clients/node/run_tests.sh    the Node client: tsc --strict, ESLint, npm pack, node --test on real
#      instances (extension, SQL edition, preloaded) and real PgBouncers
#   6. pg_test/edition/run.sh        the SQL edition (edition/advlock_sql.sql) on every major:
#      the same regress + isolation suites, key vectors, race stress, the docs' edition examples; its
#      signatures and the move to the extension where the extension is installed (the stresses
#      at a quarter of their sizes, ADVLOCK_SMALL=1, on the majors other than DEFAULT)
#   7. bench/run.sh --quick          the benchmark harness at tiny sizes, so it never rots
#   7b. pg_test/up/run.sh            scripts/up.sh on DEFAULT's test tree (own port and data):
#      preloaded, SCHEMA public, the idle-lock timeout off; a second run reloads, a third
#      restarts, the data kept; the lease/election examples of README.md, docs/ and the three
#      client READMEs against its cluster
#   8. the other majors (15, 16, 18): cargo pgrx test pgNN, preloaded and not
#   8b. pg_test/source/run.sh        scripts/install-from-source.sh as documented, built from an
#      empty target directory, into copies of 18's wheel tree and Debian's 15, a smoke test on each
#   9. scripts/package.sh            .deb + tarball for every major (lintian errors fail it), built
#      in the background at nice 19 from step 5b on
#  10. pg_test/package/run.sh        per major: install the package as a DBA would (dpkg -i on 15
#      and 17 in debootstrapped Debian bookworm and trixie, each Debian's own server; the tarball's
#      install.sh on 16/18 into a copy of its wheel tree), regress + isolation plain and preloaded,
#      remove it, nothing left
#      pg_test/release/run.sh       scripts/release.sh's directory and signed apt repository, as a
#      DBA installs it in debootstrapped Debian systems (15 bookworm, 17 trixie, 18 forky: each
#      Debian's own server; a wrong key refused; purge leaves nothing), and apt upgrade 0.3.0 -> now
#  11. pg_test/pg_upgrade/run.sh     a used cluster upgraded with pg_upgrade: 17 -> 18, 16 -> 18,
#      16 -> 17, 15 -> 17 (a pair the servers cannot upgrade even without advlock: skipped, reported),
#      between copies of the two trees with the packages' files
# and prints one closing line: "advlock: N passed, M failed". Exits non-zero on any failure.
# ADVLOCK_PG_MAJORS="17 18" limits the majors (default: all of scripts/majors.sh).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
cd "$repo" || exit 1
export PATH="$HOME/.cargo/bin:$PATH"
. "$here/majors.sh"
default=$ADVLOCK_DEFAULT_MAJOR
read -r -a majors <<<"${ADVLOCK_PG_MAJORS:-${ADVLOCK_MAJORS[*]}}"

"$here/setup.sh" || { echo "advlock: 0 passed, 1 failed"; exit 1; }
# The default major's test tree, and cargo pgrx's configuration naming every test tree.
PG_CONFIG=$(test_pg_config_for "$default")
export PGRX_HOME=$ADVLOCK_TEST_PGRX_HOME

summary=$(mktemp /tmp/advlock-summary.XXXXXX)
export ADVLOCK_SUMMARY=$summary
status=0
# Each section says when it started (minutes:seconds since this command began), so a slow
# stage shows in the log (CONTRIBUTING.md keeps the whole command under 45 min).
section() { printf '\n\033[1m== %s ==\033[0m  [%d:%02d]\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }

# A server this command did not start, as a developer's would be, kept running throughout.
section "a preloaded PostgreSQL $default from the system tree, left alone (pg_test/bystander)"
"$repo/pg_test/bystander/run.sh" start || status=1

section "lints (scripts/lint.sh)"
"$here/lint.sh" || status=1

# One version: scripts/versions.py and scripts/release.sh's refusal, on copies made to disagree
# (the lint above checks the repository itself). Counted as versions.
section "one version (pg_test/release/versions.sh)"
"$repo/pg_test/release/versions.sh" || status=1

section "cargo pgrx test pg$default"
pgdata=/tmp/advlock-pgrx-test
mkdir -p "$pgdata"; chown postgres "$pgdata"
# runas_args MAJOR: initdb refuses root, so as root the test cluster runs as `postgres` in a
# directory it owns (one per major: a data directory belongs to one major).
runas_args() { [ "$(id -u)" != 0 ] || echo "--runas postgres --pgdata $pgdata/data-$1"; }
log=$(mktemp /tmp/advlock-pgrx-test.XXXXXX.log)
# pgrx_pass NAME [MAJOR]: one `cargo pgrx test pgMAJOR` run (default: the default major),
# counted as NAME in the summary.
pgrx_pass() {
  # cargo pgrx test installs its build into the test tree (PGRX_HOME's config.toml) by copying
  # over advlock.so in place; an instance kept running from that tree (ADVLOCK_TEST_KEEP) keeps
  # its file (scripts/majors.sh: detach_installed_library).
  detach_installed_library "$(test_pg_config_for "${2:-$default}")"
  # shellcheck disable=SC2046
  cargo pgrx test "pg${2:-$default}" $(runas_args "${2:-$default}") 2>&1 | tee "$log" | grep -E '^test |^test result:|panicked|^error' || true
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
section "cargo pgrx test pg$default, not preloaded"
ADVLOCK_PGRX_PRELOAD=off pgrx_pass pgrx-nopre

section "install the extension into PostgreSQL $default's test tree"
# scripts/install_ext.sh: built, then each file written beside its destination and renamed over
# it, so an instance kept running from the test tree (ADVLOCK_TEST_KEEP) never sees a
# half-written library.
if "$here/install_ext.sh" "$PG_CONFIG" >"$log" 2>&1; then
  section "pg_test suites"
  "$repo/pg_test/run.sh" || status=1
  # Labels and statistics need shared_preload_libraries; the same specs and regress files
  # expect their other output (name_1.out) there. Counted as preload-regress etc.
  presummary=$(mktemp /tmp/advlock-summary-preload.XXXXXX)
  section "pg_test suites, preloaded"
  ADVLOCK_SUMMARY=$presummary ADVLOCK_TEST_CONF="shared_preload_libraries = 'advlock'" \
    "$repo/pg_test/run.sh" regress isolation leases || status=1
  sed 's/^/preload-/' "$presummary" >>"$summary"; : >"$presummary"
  section "pg_test regress, preloaded with tiny capacities (full tables)"
  ADVLOCK_SUMMARY=$presummary ADVLOCK_TEST_CONF=$'shared_preload_libraries = \'advlock\'\nadvlock.max_labels = 2\nadvlock.max_namespaces = 2' \
    "$repo/pg_test/run.sh" regress || status=1
  sed 's/^/tiny-/' "$presummary" >>"$summary"; : >"$presummary"
  # The monitoring suite ran above without preload (namespace unknown: ns=""); preloaded the
  # exporter must report the namespace and the counters. Counted as preload-monitoring.
  section "pg_test monitoring (preloaded)"
  ADVLOCK_SUMMARY=$presummary ADVLOCK_TEST_CONF="shared_preload_libraries = 'advlock'" \
    "$repo/pg_test/run.sh" monitoring || status=1
  sed 's/^/preload-/' "$presummary" >>"$summary"
  # The same extension under Patroni: `patronictl switchover` there and back and the loss of
  # the primary (SIGKILL), with a leader, a lease and a semaphore renewed through a multi-host
  # DSN and contenders trying all along; invariants on server time. Counted as patroni.
  section "leases under a Patroni cluster: switchovers and node loss (pg_test/failover/run.sh)"
  "$repo/pg_test/failover/run.sh" || status=1
  section "the fast loop (CONTRIBUTING.md), as written"
  "$repo/pg_test/fast_loop.sh" || status=1
  # The install above, again, under a preloaded server holding a lock: the server keeps its
  # mapped library and serves on; then the tarball's install.sh the same way, which puts this
  # build back (counted as install-atomic).
  section "scripts/install_ext.sh under a running, preloaded server"
  "$repo/pg_test/install/run.sh" || status=1
else
  tail -30 "$log"; echo "install 0 1" >>"$summary"; status=1
fi

section "client key snippets (docs/keys) against the vectors"
keylog=$(mktemp /tmp/advlock-keys.XXXXXX.log)
bash "$repo/docs/keys/verify/run.sh" 2>&1 | tee "$keylog"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
sed -n 's/^keys: \([0-9]*\) passed, \([0-9]*\) failed$/keys \1 \2/p' "$keylog" >>"$summary"
grep -q '^keys: ' "$keylog" || echo "keys 0 1" >>"$summary"

# The packages' release builds (step 9) need only CPU, which the clients' suites and the SQL
# edition's below mostly leave idle (they wait on servers, timeouts, PgBouncers): scripts/package.sh
# runs beside them at the lowest priority (nice 19: a test process that wakes takes the CPU first;
# the cargo builds after it wait for its lock on target/). Its log is shown in step 9.
pkglog=$(mktemp /tmp/advlock-package.XXXXXX.log)
nice -n 19 "$here/package.sh" "${majors[@]}" >"$pkglog" 2>&1 &
pkgjob=$!

# --- the Python client (clients/python): ruff, mypy --strict, pytest against its own instance
# of PostgreSQL 17 with the extension installed above. Counted as python-client. ---
section "Python client (clients/python)"
bash "$repo/clients/python/run_tests.sh" || status=1

# --- the Ruby client (clients/ruby): gem build, minitest against its own instances of
# PostgreSQL 17 with the extension installed above. Counted as ruby-client. ---
section "Ruby client (clients/ruby)"
bash "$repo/clients/ruby/run_tests.sh" || status=1

# --- the Node client (clients/node): tsc --strict, ESLint, npm pack, node --test against its own
# instances of PostgreSQL 17 with the extension installed above. Counted as node-client. ---
section "Node client (clients/node)"
bash "$repo/clients/node/run_tests.sh" || status=1

# --- the SQL edition (pg_test/edition): regress, isolation, key vectors, grant/timeout race and
# the docs' edition examples (README.md, docs/sql-edition.md) against edition/advlock_sql.sql in databases without the extension, on
# every major; its signatures and the move to the extension where the extension is installed
# (PostgreSQL 17, just above; skipped and reported on the others). Counted as pgNN-edition-*. ---
edsummary=$(mktemp /tmp/advlock-summary-edition.XXXXXX)
for major in "${majors[@]}"; do
  major_installed "$major" || continue
  section "SQL edition: PostgreSQL $major"
  : >"$edsummary"
  # Its stresses (race, key sets) run at their default sizes on the default major and at a
  # quarter on the others: the same PL/pgSQL, raced on each server.
  small=; [ "$major" = "$default" ] || small=1
  ADVLOCK_SMALL=${ADVLOCK_SMALL:-$small} ADVLOCK_SUMMARY=$edsummary ADVLOCK_PG_MAJOR=$major "$repo/pg_test/edition/run.sh" || status=1
  sed "s/^/pg$major-/" "$edsummary" >>"$summary"
done

if [ -x "$repo/bench/run.sh" ]; then
  section "benchmark harness (--quick)"
  benchlog=$(mktemp /tmp/advlock-bench-quick.XXXXXX.log)
  # A smoke run: it must complete, and print no PASS/FAIL verdicts (tiny sizes measure nothing).
  if ADVLOCK_BENCH_PORT=${ADVLOCK_BENCH_PORT:-5431} "$repo/bench/run.sh" --quick 2>&1 | tee "$benchlog" &&
     [ "${PIPESTATUS[0]}" -eq 0 ] && ! grep -qE '^bench: (PASS|FAIL) ' "$benchlog" &&
     grep -q 'quick mode (smoke run)' "$benchlog"; then
    echo "bench-quick 1 0" >>"$summary"
  else
    echo "bench-quick 0 1" >>"$summary"; status=1
  fi
fi

# --- scripts/up.sh, the development cluster, on the default major's test tree (a port and data
# directory of its own): its runs, and every lease and election example of the README, docs and
# client READMEs against it. After the clients' suites (it uses their environments) and the
# benchmark's release build (which up.sh's is then). Counted as up. ---
section "scripts/up.sh, and the lease and election examples against its cluster (pg_test/up)"
"$repo/pg_test/up/run.sh" || status=1

# --- the other majors: the in-database suite here; regress + isolation run from the package ---
for major in "${majors[@]}"; do
  [ "$major" = "$default" ] && continue
  if ! major_installed "$major"; then
    echo "PostgreSQL $major is not installed: scripts/setup.sh failed to provide it"; echo "pg$major-setup 0 1" >>"$summary"; status=1; continue
  fi
  section "cargo pgrx test pg$major"
  pgrx_pass "pg$major-pgrx" "$major"
  section "cargo pgrx test pg$major, not preloaded"
  ADVLOCK_PGRX_PRELOAD=off pgrx_pass "pg$major-pgrx-nopre" "$major"
done

# --- the from-source install (scripts/install-from-source.sh), as a DBA runs it: into the wheel
# tree of 18 (not Debian's layout) and Debian's 15, each a release build in an empty target
# directory (nothing of the builds above reused), then a smoke test on each; and what it
# refuses (no Rust, PostgreSQL 14, no server headers). Counted as source-refusals, pgNN-source. ---
source_majors=()
for major in 18 15; do [[ " ${majors[*]} " == *" $major "* ]] && source_majors+=("$major"); done
if [ ${#source_majors[@]} -gt 0 ]; then
  section "install from source: PostgreSQL ${source_majors[*]}"
  "$repo/pg_test/source/run.sh" "${source_majors[@]}" || status=1
fi

# --- packages, installed as a DBA would, per major ---
section "packages (scripts/package.sh, built beside the clients' suites)"
wait "$pkgjob"; pkgrc=$?
cat "$pkglog"
if [ "$pkgrc" -eq 0 ]; then
  echo "package-build ${#majors[@]} 0" >>"$summary"
  for major in "${majors[@]}"; do
    section "package test: PostgreSQL $major"
    "$repo/pg_test/package/run.sh" "$major" || status=1
  done
  # The release directory (scripts/release.sh, a throwaway signing key) installed through apt in
  # clean Debian systems: 15 on bookworm, 17 on trixie, 18 on forky; the apt upgrade 0.3.0 -> now.
  section "release: signed apt repository in debootstrapped bookworm, trixie, forky; apt upgrade"
  "$repo/pg_test/release/run.sh" "${majors[@]}" || status=1
  # Major upgrades with pg_upgrade, advlock installed and used (each pair whose majors are here).
  # 17 -> 18 is the journey users take today; a pair whose server builds cannot upgrade even
  # a cluster without advlock is reported as skipped with pg_upgrade's error.
  for pair in "17 18" "16 18" "16 17" "15 17"; do
    read -r from to <<<"$pair"
    [[ " ${majors[*]} " == *" $from "* && " ${majors[*]} " == *" $to "* ]] || continue
    section "pg_upgrade: PostgreSQL $from -> $to"
    "$repo/pg_test/pg_upgrade/run.sh" "$from" "$to" || status=1
  done
else
  echo "package-build 0 1" >>"$summary"; status=1
fi

section "the server this command did not start (pg_test/bystander)"
"$repo/pg_test/bystander/run.sh" check || status=1

section "summary"
awk '{ note = ""; for (i = 4; i <= NF; i++) note = note (i > 4 ? " " : "") $i
       printf "  %-28s %5d passed, %d failed%s\n", $1, $2, $3, (note != "" ? "  (" note ")" : ""); p += $2; f += $3 }
     END { printf "advlock: %d passed, %d failed\n", p, f }' "$summary"
awk '{ f += $3 } END { exit f > 0 }' "$summary" || status=1
exit $status
