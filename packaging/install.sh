#!/bin/sh
# Installs (or, with --uninstall, removes) advlock into the PostgreSQL that pg_config describes:
#   lib/advlock.so      -> $(pg_config --pkglibdir)
#   extension/advlock*  -> $(pg_config --sharedir)/extension
# Usage: [PG_CONFIG=/path/to/pg_config] ./install.sh [--uninstall]
# Then, in each database: CREATE EXTENSION advlock;
set -eu
ADVLOCK_MAJOR=0
ADVLOCK_VERSION=0
here=$(cd "$(dirname "$0")" && pwd)
PG_CONFIG=${PG_CONFIG:-pg_config}

command -v "$PG_CONFIG" >/dev/null 2>&1 ||
  { echo "install.sh: pg_config not found; set PG_CONFIG=/path/to/pg_config" >&2; exit 1; }
major=$("$PG_CONFIG" --version | sed -n 's/^PostgreSQL \([0-9][0-9]*\).*/\1/p')
if [ "$major" != "$ADVLOCK_MAJOR" ]; then
  echo "install.sh: this build of advlock $ADVLOCK_VERSION is for PostgreSQL $ADVLOCK_MAJOR, but $PG_CONFIG is PostgreSQL ${major:-unknown}" >&2
  echo "install.sh: use the advlock-$ADVLOCK_VERSION-pg$major tarball, or point PG_CONFIG at a PostgreSQL $ADVLOCK_MAJOR" >&2
  exit 1
fi
libdir=$("$PG_CONFIG" --pkglibdir)
extdir=$("$PG_CONFIG" --sharedir)/extension
# place SRC DIR MODE: written beside its destination, then renamed over it, so a running server
# that has the old advlock.so mapped keeps that file (writing over it in place, as cp and install
# do, changes the code under the server and can crash it); it loads the new one when restarted.
place() {
  tmp="$2/$(basename "$1").tmp.$$"
  if ! { install -m "$3" "$1" "$tmp" && mv -f "$tmp" "$2/$(basename "$1")"; }; then
    rm -f "$tmp"; echo "install.sh: could not install $2/$(basename "$1")" >&2; exit 1
  fi
}

case ${1:-} in
  --uninstall)
    rm -f "$libdir/advlock.so"
    for f in "$here"/extension/*; do rm -f "$extdir/$(basename "$f")"; done
    echo "advlock $ADVLOCK_VERSION removed from $libdir and $extdir" ;;
  "")
    place "$here/lib/advlock.so" "$libdir" 755
    for f in "$here"/extension/*.sql; do place "$f" "$extdir" 644; done
    place "$here/extension/advlock.control" "$extdir" 644
    echo "advlock $ADVLOCK_VERSION installed into $libdir and $extdir"
    echo "next: CREATE EXTENSION advlock;  (and, for labels and statistics, shared_preload_libraries = 'advlock')" ;;
  *) echo "usage: [PG_CONFIG=...] $0 [--uninstall]" >&2; exit 2 ;;
esac
