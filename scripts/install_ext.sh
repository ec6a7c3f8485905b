#!/usr/bin/env bash
# Builds advlock and installs it into a PostgreSQL major without ever exposing a half-written
# file: every installed file (advlock.so, then the SQL scripts, then advlock.control) is first
# written next to its destination under a temporary name and then renamed over it (rename(2) is
# atomic within a directory). A running server that has the old advlock.so mapped keeps the old
# file (its inode) until its backends exit; a backend that loads the library afterwards gets the
# whole new one. (`cargo pgrx install` copies over the old file in place: a backend with it
# mapped then reads a library changing under it and can crash.)
# The test command (scripts/test.sh), scripts/up.sh and bench/run.sh install with it.
#
# Usage: scripts/install_ext.sh [--release] [--strip] [PG_CONFIG]
#   --release   release profile (as `cargo pgrx install --release`); default: dev, as `cargo pgrx install`
#   --strip     strip the library's debug information first (a dev build's 60 MB become a few)
#   PG_CONFIG   the major's pg_config (default: ADVLOCK_PG_CONFIG, else the default major's test
#               tree, where the suites run: scripts/majors.sh test_pg_config_for; scripts/up.sh
#               names the system tree's)
# Builds with `cargo pgrx package` into a staging directory (CARGO_TARGET_DIR as usual).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
export PATH="$HOME/.cargo/bin:$PATH"
. "$here/majors.sh"
profile=(--debug) strip=0
while [ $# -gt 0 ]; do
  case $1 in
    --release) profile=(); shift ;;
    --strip) strip=1; shift ;;
    *) break ;;
  esac
done
pgc=${1:-${ADVLOCK_PG_CONFIG:-$(test_pg_config_for "$ADVLOCK_DEFAULT_MAJOR")}}
# Into a test tree, with the test command's PGRX_HOME (unless one is set): pgrx-pg-sys regenerates
# its bindings whenever the pgrx configuration it was built with changes.
case $pgc in "$ADVLOCK_TEST_PG_ROOT"/*) export PGRX_HOME=${PGRX_HOME:-$ADVLOCK_TEST_PGRX_HOME} ;; esac

stage=$(mktemp -d /tmp/advlock-install-stage.XXXXXX)
trap 'rm -rf "$stage"' EXIT
(cd "$repo" && cargo pgrx package "${profile[@]}" --pg-config "$pgc" --out-dir "$stage")

libdir=$("$pgc" --pkglibdir)
extdir=$("$pgc" --sharedir)/extension
# cargo pgrx package lays the files out under the staging directory by their absolute paths.
so="$stage$libdir/advlock.so"
control="$stage$extdir/advlock.control"
if [ ! -f "$so" ] || [ ! -f "$control" ]; then
  echo "install_ext: cargo pgrx package left no $so or $control" >&2; exit 1
fi

[ "$strip" = 0 ] || strip --strip-debug "$so"

# place SRC DIR NAME MODE: SRC copied to DIR/NAME.tmp.PID (same directory, so the same file
# system), then renamed to DIR/NAME; the temporary file is removed if either step fails.
place() {
  local tmp="$2/$3.tmp.$$"
  if ! { install -m "$4" "$1" "$tmp" && mv -f "$tmp" "$2/$3"; }; then
    rm -f "$tmp"; echo "install_ext: could not install $2/$3" >&2; return 1
  fi
}
place "$so" "$libdir" advlock.so 755
for sql in "$stage$extdir"/advlock--*.sql; do
  place "$sql" "$extdir" "$(basename "$sql")" 644
done
place "$control" "$extdir" advlock.control 644
echo "install_ext: installed advlock $(sed -n "s/^default_version = '\(.*\)'/\1/p" "$control") into $libdir and $extdir"
