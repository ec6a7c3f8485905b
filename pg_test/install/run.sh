#!/usr/bin/env bash
# scripts/install_ext.sh under a running server: PostgreSQL preloaded with advlock (the
# postmaster and every backend have advlock.so mapped) and a session holding a lock while a
# rebuilt, different library (a stripped build) is installed. The install must leave the
# server's mapped file alone (a new file renamed over the name: the old one shows as deleted in
# the postmaster's mappings) and the server serving: the postmaster alive, no backend killed by
# a signal, the holding session still answering and still holding, a new connection able to
# CREATE EXTENSION and compute a key; after a restart the server maps the new file. Then the
# tarball's installer (packaging/install.sh) puts the first build back the same way. Last, the
# test command's detach before cargo pgrx test's in-place copy (scripts/majors.sh).
# Writes "install-atomic passed failed" to $ADVLOCK_SUMMARY.
# Usage: pg_test/install/run.sh   (ADVLOCK_PG_MAJOR; ADVLOCK_INSTALL_TEST_PORT, default 5483)
# shellcheck source-path=SCRIPTDIR
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$(dirname "$here")")"
# shellcheck source=../instance.sh
. "$repo/pg_test/instance.sh"
check_name=install-atomic
# shellcheck source=../check.sh
. "$repo/pg_test/check.sh"
summary=${ADVLOCK_SUMMARY:-/dev/null}
port=${ADVLOCK_INSTALL_TEST_PORT:-5483}
work=$(mktemp -d /tmp/advlock-install-test.XXXXXX)
chmod 755 "$work"; chown postgres "$work"
session=""
cleanup() {
  exec 3>&-
  [ -z "$session" ] || kill "$session" 2>/dev/null
  instance_stop "$work"
  echo "install-atomic $passed $failed" >>"$summary"
  echo "install-atomic: $passed checks passed, $failed failed"
  rm -rf "$work"
}
trap cleanup EXIT
trap '' PIPE   # a session that died makes a write to it fail (and a check with it), not this script
fail_now() { echo "install-atomic: FAIL $1"; failed=$((failed + 1)); exit 1; }
so="$("$PG_CONFIG" --pkglibdir)/advlock.so"
psql_() { as_postgres "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$work" -p "$port" -U postgres "$@"; }

"$repo/scripts/install_ext.sh" "$PG_CONFIG" >"$work/install-1.log" 2>&1 || { tail -20 "$work/install-1.log"; fail_now "scripts/install_ext.sh (the first build)"; }
cp "$so" "$work/first.so"   # for the tarball installer's turn below
instance_start "$work" "$port" "shared_preload_libraries = 'advlock'" || fail_now "start PostgreSQL $ADVLOCK_PG_MAJOR preloaded"
postmaster=$(head -1 "$work/data/postmaster.pid")
old_inode=$(stat -c %i "$so") old_sum=$(sha256sum <"$so")
mapped() { grep -qF " $so" "/proc/$postmaster/maps" && ! grep -qF "$so (deleted)" "/proc/$postmaster/maps"; }
check "the postmaster has advlock.so mapped (preloaded)" mapped

# The holding session: psql reading statements from a pipe kept open on fd 3.
mkfifo "$work/in"; chown postgres "$work/in"
psql_ -d postgres <"$work/in" >"$work/session.out" 2>&1 &
session=$!
exec 3>"$work/in"
echo "CREATE EXTENSION IF NOT EXISTS advlock;" >&3
echo "SELECT 'held ' || advlock_try_with_timeout('install', 1, 0, scope => 'session');" >&3
answered() { for _ in $(seq 100); do grep -qx "$1" "$work/session.out" && return 0; sleep 0.1; done; return 1; }
check "a session holds a lock before the install" answered "held true"

"$repo/scripts/install_ext.sh" --strip "$PG_CONFIG" >"$work/install-2.log" 2>&1
rc=$?
check "scripts/install_ext.sh --strip installs while the server runs" test "$rc" -eq 0
[ "$rc" -eq 0 ] || tail -20 "$work/install-2.log"
check "the installed library is a different file (another inode)" test "$(stat -c %i "$so")" != "$old_inode"
check "the installed library has other contents (stripped)" test "$(sha256sum <"$so")" != "$old_sum"
check "no temporary file is left next to it" bash -c "! ls '$(dirname "$so")' | grep -q '^advlock.so.tmp'"
kept() { grep -qF "$so (deleted)" "/proc/$postmaster/maps"; }
check "the postmaster still maps the old file (now unlinked), untouched" kept
echo "SELECT 'still ' || advlock_holding(advlock_key('install', 1)) || ' ' || advlock_key('rollup', 'nightly');" >&3
check "the holding session answers after the install and still holds its lock" answered "still true 2132624222628149741"
new_connection() {
  psql_ -d postgres -c "CREATE DATABASE after_install" >/dev/null &&
    [ "$(psql_ -d after_install -c "CREATE EXTENSION advlock" -c "SELECT advlock_key('rollup', 'nightly')")" = 2132624222628149741 ]
}
check "a new connection creates the extension and computes a key" new_connection
check "the postmaster is the same process, still running" kill -0 "$postmaster"
check "no server process ended by a signal" bash -c "! grep -E 'terminated by signal|was terminated|server process .* exited with exit code [^0]' '$work/postgres.log'"
echo '\q' >&3; exec 3>&-; wait "$session"; session=""

as_postgres "$PGBIN/pg_ctl" -D "$work/data" -l "$work/postgres.log" -w -t 60 restart >/dev/null || fail_now "restart"
postmaster=$(head -1 "$work/data/postmaster.pid")
check "after a restart the postmaster maps the new library" mapped
works() { [ "$(psql_ -d after_install -c "SELECT advlock_try_with_timeout(1, 0, scope => 'session')")" = t ]; }
check "and advlock works" works

# The tarball's installer (packaging/install.sh) the same way: the first build back, over the
# stripped one the restarted server now maps.
extdir="$("$PG_CONFIG" --sharedir)/extension"
mkdir -p "$work/tree/lib" "$work/tree/extension"
cp "$work/first.so" "$work/tree/lib/advlock.so"
cp "$extdir/advlock.control" "$extdir"/advlock--*.sql "$work/tree/extension/"
sed "s/^ADVLOCK_MAJOR=.*/ADVLOCK_MAJOR=$ADVLOCK_PG_MAJOR/" "$repo/packaging/install.sh" >"$work/tree/install.sh"
old_inode=$(stat -c %i "$so")
tarball_install() { PG_CONFIG="$PG_CONFIG" sh "$work/tree/install.sh" >"$work/install-3.log" 2>&1; }
check "packaging/install.sh installs while the server runs" tarball_install
check "it too put a new file in place (another inode, the first build's contents)" \
  bash -c "[ \"\$(stat -c %i '$so')\" != '$old_inode' ] && cmp -s '$so' '$work/first.so'"
check "the postmaster still maps the file it loaded (now unlinked)" kept
key_works() { [ "$(psql_ -d after_install -c "SELECT advlock_key('rollup', 'nightly')")" = 2132624222628149741 ]; }
check "a new connection computes a key" key_works
check "the postmaster is the same process, still running" kill -0 "$postmaster"

# cargo pgrx test copies its build over advlock.so in place; the test command detaches the
# installed file first (detach_installed_library, scripts/majors.sh). Here the same: detach,
# then an in-place copy of another build (the first one, stripped) over the name, as cargo-pgrx
# does.
stripped="$work/stripped.so"
cp "$work/first.so" "$stripped" && strip --strip-debug "$stripped"
as_postgres "$PGBIN/pg_ctl" -D "$work/data" -l "$work/postgres.log" -w -t 60 restart >/dev/null || fail_now "restart"
postmaster=$(head -1 "$work/data/postmaster.pid")
check "after a restart the postmaster maps the installed file" mapped
old_inode=$(stat -c %i "$so")
detach_installed_library "$PG_CONFIG"
check "detach_installed_library put a copy in place (another inode, same contents)" \
  bash -c "[ \"\$(stat -c %i '$so')\" != '$old_inode' ] && cmp -s '$so' '$work/first.so'"
cp "$stripped" "$so"   # in place, as cargo-pgrx's install copies
check "after an in-place copy over the detached name, the postmaster still maps its own file" kept
check "a new connection computes a key" key_works
check "the postmaster is the same process, still running" kill -0 "$postmaster"
check "no server process ended by a signal" bash -c "! grep -E 'terminated by signal|was terminated|server process .* exited with exit code [^0]' '$work/postgres.log'"
[ "$failed" -eq 0 ]
