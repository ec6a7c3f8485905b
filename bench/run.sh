#!/usr/bin/env bash
# advlock's benchmark harness. Runs every case against a temporary PostgreSQL 17 instance (started
# from the test command's copy of the tree, where the build is installed) and
# writes a markdown report with PASS/FAIL per target plus SVG charts.
#
#   bench/run.sh           full run (~19 min): release build installed first, report and charts
#                          into bench/results/ (committed; the README links them)
#   bench/run.sh --quick   tiny sizes (< 60 s) against whatever build is installed (the test
#                          command installs a debug build just before); output into a scratch
#                          directory; targets are reported, not enforced
#   bench/run.sh --baseline [REF]
#                          this build against REF's (default: the previous release, the last
#                          commit sql/archive/RELEASES records), side by
#                          side: both release builds, each in its own copy of the tree; every
#                          round runs every case on both builds, the order alternating; the rounds'
#                          reports go under OUT/rounds/ and OUT/BASELINE.md compares them
#                          (harness/compare.py). Full sizes, or --quick ones.
#
# Options: --out DIR (report directory), --port N (default 5423), --no-install (full sizes, but
# skip the release build/install), --cases 1,2,... (subset, for development), --nice N (run the
# server, pgbench and the harness at this nice value, e.g. -10 on a machine busy with other work;
# needs root for negative values; stated in the report), --rounds N (with --baseline: rounds,
# default 2).
# Exit status: 0 when the harness ran end to end (even if targets FAIL), non-zero when the
# harness itself broke (build, server, a case raising, report missing).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
. "$repo/pg_test/instance.sh"
export PATH="$HOME/.cargo/bin:$PATH"
# PG_CONFIG and PGBIN come from pg_test/instance.sh: PostgreSQL 17's test tree (scripts/majors.sh,
# test_pg_config_for; ADVLOCK_PG_MAJOR, ADVLOCK_PG_CONFIG choose another), never the system tree,
# whose running servers the full run's install must not change.

quick=0 install=1 port=${ADVLOCK_BENCH_PORT:-5423} out="" cases="" nice=0 baseline="" rounds=2
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1; install=0 ;;
    --no-install) install=0 ;;
    --port) port=$2; shift ;;
    --out) out=$(realpath -m -- "$2"); shift ;;   # absolute: the harness runs from bench/
    --cases) cases=$2; shift ;;
    --nice) nice=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --baseline)
      if [ $# -gt 1 ] && [ "${2#-}" = "$2" ]; then baseline=$2; shift; else baseline=previous-release; fi ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "bench: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

python=$repo/pg_test/.venv/bin/python
if ! "$python" -c 'import psycopg' 2>/dev/null; then
  echo "bench: $python with psycopg is missing; run scripts/setup.sh first" >&2
  exit 1
fi
[ -x "$PGBIN/pgbench" ] || { echo "bench: $PGBIN/pgbench not found" >&2; exit 1; }

if [ -n "$baseline" ]; then
  case $rounds in ''|*[!0-9]*|0) echo "bench: --rounds must be a positive number, not '$rounds'" >&2; exit 2 ;; esac
  . "$here/baseline.sh"
  run_against_baseline
  exit $?
fi

if [ $quick = 1 ]; then
  [ -n "$out" ] || out=$(mktemp -d /tmp/advlock-bench-quick.XXXXXX)
  profile=${ADVLOCK_BENCH_PROFILE:-"as installed (quick mode does not build; the test command installs a debug build just before)"}
else
  [ -n "$out" ] || out=$here/results
  if [ $install = 1 ]; then
    echo "bench: scripts/install_ext.sh --release"
    log=$(mktemp /tmp/advlock-bench-install.XXXXXX.log)
    if ! "$repo/scripts/install_ext.sh" --release "$PG_CONFIG" >"$log" 2>&1; then
      tail -30 "$log"; echo "bench: release build/install failed" >&2; exit 1
    fi
    profile="release (scripts/install_ext.sh --release, this run)"
  else
    profile=${ADVLOCK_BENCH_PROFILE:-"as installed (--no-install: not rebuilt by this run)"}
  fi
fi
mkdir -p "$out"

work=$(mktemp -d /tmp/advlock-bench.XXXXXX)
chmod 755 "$work"; chown postgres "$work" 2>/dev/null || true
cleanup() { instance_stop "$work"; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# Sized for case 5 (up to 100k advisory + 100k relation locks held at once: the shared lock
# table holds max_locks_per_transaction * (max_connections + workers) entries) and tuned for
# repeatable timings: no JIT, no parallel query, no autovacuum, no WAL flushes.
conf=(
  'max_connections = 100'
  'max_locks_per_transaction = 4096'
  'shared_buffers = 256MB'
  'jit = off'
  'max_parallel_workers_per_gather = 0'
  'autovacuum = off'
  'synchronous_commit = off'
  'log_min_messages = warning'
  'log_lock_waits = off'
)
echo "bench: starting PostgreSQL $ADVLOCK_PG_MAJOR on 127.0.0.1:$port (data in $work/data)"
instance_start "$work" "$port" "${conf[@]}" || { echo "bench: could not start PostgreSQL $ADVLOCK_PG_MAJOR" >&2; exit 1; }
# Pin the binary for the whole run: other work on this machine (a test run) may reinstall the
# library into pkglibdir while we measure, and every new backend would load whatever is there.
# The bench database's C functions point at a private copy taken now.
pkglib=$("$PG_CONFIG" --pkglibdir)
mkdir -p "$work/lib"
cp "$pkglib/advlock.so" "$work/lib/advlock.so" && chmod 755 "$work/lib" "$work/lib/advlock.so"
if [ $quick = 0 ] && [ $install = 1 ] && ! cmp -s "$work/lib/advlock.so" "${CARGO_TARGET_DIR:-$repo/target}/release/libadvlock.so"; then
  echo "bench: the installed advlock.so is not the release build just made (reinstalled meanwhile?); rerun" >&2
  exit 1
fi
as_postgres "$PGBIN/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 \
  -c "CREATE DATABASE bench" -c "\\c bench" -c "CREATE EXTENSION advlock" \
  -c "UPDATE pg_proc SET probin = '$work/lib/advlock.so' WHERE probin = '\$libdir/advlock'" >/dev/null ||
  { echo "bench: could not create the bench database / extension" >&2; exit 1; }

if [ "$nice" != 0 ]; then
  # Backends fork from the postmaster and inherit its nice value.
  renice -n "$nice" -p "$(head -1 "$work/data/postmaster.pid")" >/dev/null ||
    { echo "bench: renice $nice failed" >&2; exit 1; }
fi

args=(--lib "$work/lib/advlock.so" --nice "$nice" --port "$port" --dbname bench --out "$out" --work "$work" --pgbin "$PGBIN" --profile "$profile")
[ $quick = 1 ] && args+=(--quick)
[ -n "$cases" ] && args+=(--cases "$cases")
(cd "$here" && nice -n "$nice" "$python" -m harness.main "${args[@]}")
rc=$?
if [ $rc -ne 0 ]; then
  echo "bench: harness failed (exit $rc); server log tail:" >&2
  tail -20 "$work/postgres.log" >&2
  exit $rc
fi
echo "bench: report in $out/REPORT.md"
