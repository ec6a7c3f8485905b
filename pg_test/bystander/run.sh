#!/usr/bin/env bash
# The test command leaves alone a server it did not start (issue #41): scripts/test.sh runs
# `start` before its first suite and `check` after its last.
#   start  a PostgreSQL 17 cluster from the SYSTEM tree (scripts/majors.sh pg_config_for, as
#          scripts/up.sh's cluster is) with shared_preload_libraries = 'advlock', in a data
#          directory of its own on its own port, and a session holding a session advisory lock
#          through advlock (then busy in pg_sleep, so no idle timeout applies); records the system
#          advlock.so's inode and sha256, the postmaster's pid and start time, and every advlock
#          file of every system tree (15, 16, 17, 18) with its inode and sha256
#   check  the server answers; its postmaster is the same process with the same start time
#          (never restarted); the same backend still holds the lock; the system advlock.so has
#          the same inode and bytes, mapped by the postmaster; no advlock file of a system tree
#          was added, removed or changed. Then stops the cluster.
# Where the system PostgreSQL 17 has no advlock.so (scripts/up.sh never ran on this machine),
# the cluster runs without the preload and nobody holds a lock: the other checks run, and the
# summary line says what could not be tested.
# Writes "bystander passed failed [note]" to $ADVLOCK_SUMMARY (on check, or when start fails).
# Usage: pg_test/bystander/run.sh start|check
#   ADVLOCK_BYSTANDER_DIR (default /tmp/advlock-bystander), ADVLOCK_BYSTANDER_PORT (default 5490)
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$(dirname "$here")")"
. "$repo/scripts/majors.sh"
. "$repo/scripts/helpers.sh"
summary=${ADVLOCK_SUMMARY:-/dev/null}
dir=${ADVLOCK_BYSTANDER_DIR:-/tmp/advlock-bystander}
port=${ADVLOCK_BYSTANDER_PORT:-5490}
major=$ADVLOCK_DEFAULT_MAJOR
pgc=$(pg_config_for "$major")
PGBIN=$("$pgc" --bindir)
so="$("$pgc" --pkglibdir)/advlock.so"
check_name=bystander
. "$repo/pg_test/check.sh"
q() { as_postgres "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres -d postgres -c "$1"; }
stop() { [ -f "$dir/data/postmaster.pid" ] && as_postgres "$PGBIN/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1; }
# system_advlock_files: every advlock file of the system trees, with its inode and sha256.
system_advlock_files() {
  local m pgc_m
  for m in "${ADVLOCK_MAJORS[@]}"; do
    pgc_m=$(pg_config_for "$m"); [ -x "$pgc_m" ] || continue
    find "$("$pgc_m" --pkglibdir)" "$("$pgc_m" --sharedir)/extension" -maxdepth 1 -name 'advlock*' -type f \
      -printf '%p %i ' -exec sh -c 'sha256sum <"$1" | cut -d" " -f1' _ {} \;
  done | sort
}

case ${1:-} in
start)
  stop; rm -rf "$dir"; mkdir -p "$dir"; chmod 755 "$dir"; chown postgres "$dir"
  conf=(); preloaded=0
  if [ -f "$so" ]; then conf=("shared_preload_libraries = 'advlock'"); preloaded=1; fi
  start_server() {
    as_postgres "$PGBIN/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-sync >"$dir/initdb.log" 2>&1 &&
      printf '%s\n' "port = $port" "listen_addresses = ''" "unix_socket_directories = '$dir'" "${conf[@]}" |
        as_postgres tee -a "$dir/data/postgresql.conf" >/dev/null &&
      as_postgres "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 start >/dev/null
  }
  if ! start_server; then
    tail -20 "$dir/postgres.log" "$dir/initdb.log" 2>/dev/null
    echo "bystander 0 1 could not start PostgreSQL $major from the system tree" >>"$summary"; exit 1
  fi
  echo "$preloaded" >"$dir/preloaded"
  head -1 "$dir/data/postmaster.pid" >"$dir/postmaster.pid"
  q "SELECT pg_postmaster_start_time()" >"$dir/start_time"
  system_advlock_files >"$dir/system-files"
  if [ "$preloaded" = 1 ]; then
    stat -c %i "$so" >"$dir/so.inode"; sha256sum <"$so" | cut -d' ' -f1 >"$dir/so.sha256"
    q "CREATE EXTENSION advlock SCHEMA public" >/dev/null
    # The holder: its backend pid, then the lock, then a long sleep (active, not idle), detached
    # from this script so that it outlives it.
    runner=(); [ "$(id -un)" = postgres ] || runner=(sudo -u postgres --)
    setsid "${runner[@]}" "$PGBIN/psql" -X -q -At -h "$dir" -p "$port" -U postgres -d postgres \
      -c "SELECT pg_backend_pid()" -c "SELECT advlock_try_with_timeout('bystander', 1, 0, scope => 'session')" \
      -c "SELECT pg_sleep(21600)" >"$dir/holder.out" 2>&1 </dev/null &
    for _ in $(seq 100); do [ "$(sed -n 2p "$dir/holder.out")" = t ] && break; sleep 0.1; done
    if [ "$(sed -n 2p "$dir/holder.out")" != t ]; then
      cat "$dir/holder.out"; stop
      echo "bystander 0 1 the holding session did not get its lock" >>"$summary"; exit 1
    fi
    echo "bystander: PostgreSQL $major from the system tree, advlock preloaded, port $port: backend $(head -1 "$dir/holder.out") holds advlock_key('bystander', 1)"
  else
    echo "bystander: PostgreSQL $major from the system tree, port $port, WITHOUT the preload: $so does not exist (scripts/up.sh installs it)"
  fi
  ;;
check)
  [ -f "$dir/start_time" ] || { echo "bystander 0 1 never started" >>"$summary"; exit 1; }
  preloaded=$(cat "$dir/preloaded") postmaster=$(cat "$dir/postmaster.pid")
  answers() { [ "$(q "SELECT 1")" = 1 ]; }
  check "the server answers" answers
  check "the postmaster is the same process (pid $postmaster)" \
    bash -c "kill -0 $postmaster && [ \"\$(head -1 '$dir/data/postmaster.pid')\" = $postmaster ]"
  check "its start time is the same ($(cat "$dir/start_time")): never restarted" \
    test "$(q "SELECT pg_postmaster_start_time()")" = "$(cat "$dir/start_time")"
  check "no server process ended by a signal" \
    bash -c "! grep -E 'terminated by signal|was terminated|exited with exit code [^0]' '$dir/postgres.log'"
  check "no advlock file of a system tree (15-18) was added, removed or changed" \
    diff "$dir/system-files" <(system_advlock_files)
  note=""
  if [ "$preloaded" = 1 ]; then
    holder=$(head -1 "$dir/holder.out")
    check "the holding session (backend $holder) still holds its session lock" test "$(q \
      "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
        WHERE l.locktype = 'advisory' AND l.granted AND l.pid = $holder AND a.state = 'active'")" = 1
    check "the system advlock.so has the same inode ($(cat "$dir/so.inode"))" test "$(stat -c %i "$so")" = "$(cat "$dir/so.inode")"
    check "the system advlock.so has the same bytes (sha256)" test "$(sha256sum <"$so" | cut -d' ' -f1)" = "$(cat "$dir/so.sha256")"
    check "the postmaster maps it (not a deleted file)" \
      bash -c "grep -qF ' $so' /proc/$postmaster/maps && ! grep -qF '$so (deleted)' /proc/$postmaster/maps"
    check "a new session computes a key with it" test "$(q "SELECT advlock_key('rollup', 'nightly')")" = 2132624222628149741
  else
    note="not preloaded: no advlock.so in the system PostgreSQL $major (scripts/up.sh installs it)"
  fi
  stop
  echo "bystander $passed $failed${note:+ $note}" >>"$summary"
  echo "bystander: $passed checks passed, $failed failed${note:+ ($note)}"
  [ "$failed" -eq 0 ]
  ;;
*) echo "usage: pg_test/bystander/run.sh start|check" >&2; exit 2 ;;
esac
