#!/usr/bin/env bash
# Builds advlock from this source tree for one PostgreSQL server and installs it there:
#
#   scripts/install-from-source.sh --pg-config /path/to/pg_config
#
# Any PostgreSQL 15, 16, 17 or 18 (Debian/Ubuntu, PGDG, RHEL, Homebrew-style or self-built
# trees alike): the major is read from `pg_config --version` and the files go where that
# pg_config says ($(pg_config --pkglibdir), $(pg_config --sharedir)/extension).
# Needs, on the machine that builds:
#   - Rust (stable, 1.89 or newer) with cargo: rustup installs it for the user who builds (no
#     root needed);
#   - a C compiler and linker (cc: gcc or clang) and libclang (bindgen, which pgrx uses to read
#     the server's headers): Debian/Ubuntu `build-essential libclang-dev`, RHEL/Fedora
#     `gcc clang-devel`;
#   - the server's development headers: Debian/Ubuntu `postgresql-server-dev-NN`, RHEL/Fedora
#     (PGDG) `postgresqlNN-devel`; a self-built server has them after `make install`.
# What it does: checks all of that first and says what is missing (exit 1, nothing changed);
# installs cargo-pgrx 0.18.1 for the user when it is missing (`cargo install --locked`); runs
# `cargo pgrx init --pgNN=PG_CONFIG` in a pgrx home of its own (target/pgrx-home-NN: a
# ~/.pgrx/config.toml of yours is left alone); builds the release library for exactly that
# server (`cargo pgrx package`, which is `cargo pgrx install --release` into a staging
# directory); then copies the files into the server's directories, each written to a temporary
# name beside its target and renamed over it (a running server keeps the library it has mapped,
# never a half-written one), with sudo only when those directories are not writable. Finally it
# prints what to do next (CREATE EXTENSION, the optional preload, a restart after an upgrade).
#
# Options: --pg-config PATH (default: the pg_config on PATH)   --no-sudo (fail instead of sudo)
# Environment: CARGO_TARGET_DIR (default target/), ADVLOCK_PGRX_HOME (default target/pgrx-home-NN)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
cd "$repo"

PGRX_VERSION=0.18.1
SUPPORTED=(15 16 17 18)
say() { printf 'install-from-source: %s\n' "$*"; }
die() { printf 'install-from-source: %s\n' "$@" >&2; exit 1; }

pg_config="" use_sudo=auto
while [ $# -gt 0 ]; do
  case $1 in
    --pg-config) [ $# -ge 2 ] || die "--pg-config needs the path of a pg_config"; pg_config=$2; shift 2 ;;
    --pg-config=*) pg_config=${1#--pg-config=}; shift ;;
    --no-sudo) use_sudo=never; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: $0 --pg-config /path/to/pg_config [--no-sudo]" >&2; exit 2 ;;
  esac
done

# --- the server: pg_config, its major, its headers ------------------------------------------
if [ -z "$pg_config" ]; then
  pg_config=$(command -v pg_config) ||
    die "no pg_config on PATH: name your server's with --pg-config /path/to/pg_config" \
        "(e.g. /usr/lib/postgresql/17/bin/pg_config on Debian/Ubuntu, /usr/pgsql-17/bin/pg_config on RHEL)"
  say "using $pg_config (the first on PATH; --pg-config names another)"
fi
[ -x "$pg_config" ] || die "$pg_config is not an executable pg_config"
pg_version=$("$pg_config" --version) || die "$pg_config --version failed"
major=$(sed -n 's/^PostgreSQL \([0-9][0-9]*\).*/\1/p' <<<"$pg_version")
[ -n "$major" ] || die "$pg_config --version says '$pg_version', not 'PostgreSQL NN...'"
if [[ " ${SUPPORTED[*]} " != *" $major "* ]]; then
  die "$pg_config is $pg_version; advlock supports PostgreSQL 15, 16, 17 and 18 only." \
      "Point --pg-config at the pg_config of a supported server."
fi
includedir=$("$pg_config" --includedir-server)
libdir=$("$pg_config" --pkglibdir)
extdir="$("$pg_config" --sharedir)/extension"

missing=()
[ -f "$includedir/postgres.h" ] ||
  missing+=("the PostgreSQL $major server headers ($includedir/postgres.h): Debian/Ubuntu" \
            "  'apt-get install postgresql-server-dev-$major', RHEL/Fedora (PGDG) 'dnf install postgresql$major-devel'")

# --- Rust: cargo and rustc, from rustup (the usual ~/.cargo/bin need not be on PATH yet) ------
cargo_home=${CARGO_HOME:-$HOME/.cargo}
cargo_bin=$cargo_home/bin
[ -d "$cargo_bin" ] && PATH="$cargo_bin:$PATH"
if ! command -v cargo >/dev/null || ! command -v rustc >/dev/null; then
  what="cargo and rustc"; command -v cargo >/dev/null && what="rustc"; command -v rustc >/dev/null && what="cargo"
  missing+=("Rust: $what not found on PATH nor in $cargo_bin. Install Rust (stable) for the user" \
            "  who builds, with rustup: your distribution's 'rustup' package or the installer of rustup.rs," \
            "  then 'rustup default stable' and open a new shell (or: . \"$cargo_home/env\")")
fi
# The release build's dependencies need Rust 1.89 or newer (uuid's rust-version; pgrx 0.18 is
# edition 2024); a distribution's rustc is often older. Tested with 1.95.
RUST_MIN=1.89
rust_version=""
if command -v rustc >/dev/null; then
  rust_version=$(rustc --version 2>/dev/null | sed -n 's/^rustc \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p') || true
fi
if [ -n "$rust_version" ] && [ "$(printf '%s\n' "$RUST_MIN" "$rust_version" | sort -V | head -1)" != "$RUST_MIN" ]; then
  missing+=("Rust $RUST_MIN or newer: $(command -v rustc) is $rust_version (a distribution's package?). With rustup:" \
            "  'rustup update stable', and $cargo_bin first on PATH; without it, install rustup for your user")
fi
command -v cc >/dev/null ||
  missing+=("a C compiler and linker (cc): Debian/Ubuntu 'apt-get install build-essential', RHEL/Fedora 'dnf install gcc'")
# libclang: bindgen loads it at build time (LIBCLANG_PATH, else the linker's cache and llvm-config).
libclang_found() {
  local d
  for d in ${LIBCLANG_PATH:-} $(llvm-config --libdir 2>/dev/null) /usr/lib/llvm-*/lib /usr/lib64 /usr/lib/x86_64-linux-gnu /usr/lib; do
    compgen -G "$d/libclang*.so*" >/dev/null && return 0
  done
  ldconfig -p 2>/dev/null | grep -q 'libclang[-.0-9]*\.so'
}
libclang_found ||
  missing+=("libclang (bindgen reads the server's headers with it): Debian/Ubuntu 'apt-get install libclang-dev'," \
            "  RHEL/Fedora 'dnf install clang-devel'; or set LIBCLANG_PATH to the directory holding libclang.so")
if [ ${#missing[@]} -gt 0 ]; then
  {
    echo "install-from-source: cannot build advlock for $pg_version yet; missing:"
    for m in "${missing[@]}"; do
      case $m in "  "*) echo "    ${m#  }" ;; *) echo "  - $m" ;; esac
    done
    echo "install-from-source: nothing was changed. Install what is missing, then run this again."
  } >&2
  exit 1
fi

# Who may write the server's directories: decided before the build, which takes minutes.
run=()
if [ ! -w "$libdir" ] || [ ! -w "$extdir" ]; then
  if [ "$(id -u)" = 0 ]; then :
  elif [ "$use_sudo" = never ]; then die "$libdir or $extdir is not writable by $(id -un) (--no-sudo): nothing was changed"
  elif command -v sudo >/dev/null; then run=(sudo); say "$libdir or $extdir is not writable by $(id -un): the files will be copied with sudo"
  else die "$libdir or $extdir is not writable by $(id -un), and there is no sudo: run this as a user who may write there"
  fi
fi

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
say "advlock $version for $pg_version ($pg_config)"
say "$(rustc --version), $(cargo --version)"

# --- cargo-pgrx, and a pgrx home that knows this server --------------------------------------
if ! cargo pgrx --version 2>/dev/null | grep -q " $PGRX_VERSION\$"; then
  say "installing cargo-pgrx $PGRX_VERSION for $(id -un) (cargo install --locked; a few minutes)"
  cargo install --locked cargo-pgrx --version "$PGRX_VERSION"
fi
target=${CARGO_TARGET_DIR:-$repo/target}
export PGRX_HOME=${ADVLOCK_PGRX_HOME:-$target/pgrx-home-$major}
mkdir -p "$PGRX_HOME"
# Once: rewriting config.toml would make pgrx-pg-sys regenerate its bindings at every build.
if ! grep -qsF "pg$major = \"$pg_config\"" "$PGRX_HOME/config.toml"; then
  say "cargo pgrx init --pg$major=$pg_config  (PGRX_HOME=$PGRX_HOME)"
  cargo pgrx init "--pg$major=$pg_config" >"$PGRX_HOME/init.log" 2>&1 || { cat "$PGRX_HOME/init.log" >&2; die "cargo pgrx init failed"; }
fi

# --- the release build, staged ---------------------------------------------------------------
stage="$target/install-from-source/pg$major"
rm -rf "$stage"; mkdir -p "$stage"
say "building (release) for PostgreSQL $major: cargo pgrx package --pg-config $pg_config"
cargo pgrx package --pg-config "$pg_config" --out-dir "$stage" ||
  die "the build failed (the output above says why)"
so=$(find "$stage" -name advlock.so -path "*$libdir/*" | head -1)
control=$(find "$stage" -name advlock.control -path "*$extdir/*" | head -1)
{ [ -n "$so" ] && [ -n "$control" ]; } || die "cargo pgrx package left no advlock.so / advlock.control under $stage"
staged_ext=$(dirname "$control")

# --- the install: temporary name + rename, per file; sudo only where needed -----------------
# put SRC DIR NAME MODE: DIR/NAME replaced by a copy of SRC in one rename (same file system).
put() {
  local tmp="$2/.$3.advlock-install.$$"
  if ! { "${run[@]}" install -m "$4" "$1" "$tmp" && "${run[@]}" mv -f "$tmp" "$2/$3"; }; then
    "${run[@]}" rm -f "$tmp"; die "could not install $2/$3"
  fi
}
# The order of scripts/install_ext.sh (the test command's install): the library, the SQL
# scripts, and the control file last, so a new default_version never names a missing script.
put "$so" "$libdir" advlock.so 755
for f in "$staged_ext"/advlock--*.sql; do
  put "$f" "$extdir" "$(basename "$f")" 644
done
put "$control" "$extdir" advlock.control 644
say "installed advlock $version: $libdir/advlock.so, $extdir/advlock.control and $(find "$staged_ext" -name 'advlock--*.sql' | wc -l) SQL scripts"

cat <<NEXT

Next:
  1. In each database that uses it (as its owner or a superuser; the extension is trusted):
       CREATE EXTENSION IF NOT EXISTS advlock SCHEMA public;
     A database that has an older advlock: restart the server, then ALTER EXTENSION advlock UPDATE;
  2. Optional, for labels, statistics and leases: in postgresql.conf
       shared_preload_libraries = 'advlock'
     then restart the server.
NEXT
