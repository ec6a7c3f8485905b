#!/usr/bin/env bash
# Builds advlock's binary packages, which a DBA installs without Rust:
#   target/packages/postgresql-NN-advlock_<version>-1_amd64.deb   Debian layout, Depends: postgresql-NN
#   target/packages/advlock-<version>-pgNN-linux-x86_64.tar.gz    the same files + install.sh, for
#                                                                 any PostgreSQL NN found by pg_config
# for every major given (default: every supported major installed here), from `cargo pgrx package`
# (release build), linked against Debian bookworm's glibc 2.36 (scripts/majors.sh: ADVLOCK_SYSROOT)
# so that the packages install on bookworm and everything newer. Each .deb is checked with
# lintian; an error fails the build, as does a glibc symbol newer than 2.36.
#
# Usage: scripts/package.sh [15 16 17 18]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
cd "$repo"
. "$here/majors.sh"
export PATH="$HOME/.cargo/bin:$PATH"

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
debversion="$version-1"
out="$repo/target/packages"
mkdir -p "$out"
majors=("$@")
if [ ${#majors[@]} -eq 0 ]; then
  for m in "${ADVLOCK_MAJORS[@]}"; do major_installed "$m" && majors+=("$m"); done
fi
log() { printf '\033[1m[package]\033[0m %s\n' "$*"; }

sysroot_installed || { echo "package: no glibc sysroot at $ADVLOCK_SYSROOT (scripts/setup.sh installs it)" >&2; exit 1; }
# User -L paths come before the compiler's own, so libc.so, libc_nonshared.a and libgcc_s resolve
# in the sysroot; the symbol versions recorded are then those glibc 2.36 has.
lib=$ADVLOCK_SYSROOT/usr/lib/x86_64-linux-gnu
export RUSTFLAGS="-C link-arg=--sysroot=$ADVLOCK_SYSROOT -C link-arg=-L$lib -C link-arg=-L$ADVLOCK_SYSROOT/lib/x86_64-linux-gnu"
glibc_max=2.36

# deb_depends SO: Depends for the shared object, from the Debian symbols files of the libraries
# it links (dpkg-shlibdeps), e.g. "libc6 (>= 2.34), libgcc-s1 (>= 4.2)".
deb_depends() {
  local tmp; tmp=$(mktemp -d)
  mkdir -p "$tmp/debian"; printf 'Source: advlock\n\nPackage: advlock\nArchitecture: any\n' >"$tmp/debian/control"
  (cd "$tmp" && dpkg-shlibdeps -O "$1" 2>/dev/null) | sed -n 's/^shlibs:Depends=//p'
  rm -rf "$tmp"
}

for major in "${majors[@]}"; do
  pgc=$(pg_config_for "$major")
  major_installed "$major" || { echo "package: PostgreSQL $major is not installed (scripts/setup.sh)" >&2; exit 1; }
  log "PostgreSQL $major: cargo pgrx package (release)"
  stage="$repo/target/package-stage/pg$major"
  rm -rf "$stage"; mkdir -p "$stage"
  cargo pgrx package --pg-config "$pgc" --out-dir "$stage/pgrx" >"$stage/build.log" 2>&1 ||
    { tail -40 "$stage/build.log"; exit 1; }
  so=$(find "$stage/pgrx" -name advlock.so | head -1)
  control=$(find "$stage/pgrx" -name advlock.control | head -1)
  { [ -n "$so" ] && [ -n "$control" ]; } || { echo "package: cargo pgrx package produced no advlock.so/control" >&2; exit 1; }
  extdir=$(dirname "$control")
  too_new=$(objdump -T "$so" | grep -oE 'GLIBC_2\.[0-9]+' | sort -u | awk -F. -v max="${glibc_max#2.}" '$2 > max')
  if [ -n "$too_new" ] || objdump -T "$so" | grep -q '__isoc23_'; then
    echo "package: $so needs glibc symbols newer than $glibc_max: $too_new" >&2; exit 1
  fi
  # cargo pgrx package already put the upgrade scripts (sql/advlock--A--B.sql) next to it.
  ls "$extdir"/advlock--*--*.sql >/dev/null || { echo "package: no upgrade scripts in $extdir" >&2; exit 1; }

  # --- Debian package --------------------------------------------------------------------
  pkg="postgresql-$major-advlock"
  root="$stage/deb"
  install -d "$root/DEBIAN" "$root/usr/lib/postgresql/$major/lib" "$root/usr/share/postgresql/$major/extension" \
    "$root/usr/share/doc/$pkg"
  install -m 644 "$so" "$root/usr/lib/postgresql/$major/lib/advlock.so"
  # Debug symbols are not shipped (Debian policy 10.1); the release profile keeps none anyway.
  strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/lib/postgresql/$major/lib/advlock.so"
  install -m 644 "$extdir"/advlock.control "$extdir"/advlock--*.sql "$root/usr/share/postgresql/$major/extension/"
  {
    echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
    echo "Upstream-Name: advlock"
    echo "Source: the advlock source repository (built by scripts/package.sh)"
    echo
    echo "Files: *"
    echo "Copyright: 2026 The advlock contributors"
    echo "License: PostgreSQL"
    sed -n '3,$p' LICENSE | sed 's/^$/./; s/^/ /'
  } >"$root/usr/share/doc/$pkg/copyright"
  {
    echo "$pkg ($debversion) unstable; urgency=medium"
    echo
    echo "  * advlock $version built for PostgreSQL $major; see CHANGELOG.md upstream."
    echo
    echo " -- advlock maintainers <advlock@localhost.invalid>  $(date -R -d @"${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}")"
  } | gzip -9n >"$root/usr/share/doc/$pkg/changelog.Debian.gz"
  depends="postgresql-$major"
  shlibs=$(deb_depends "$root/usr/lib/postgresql/$major/lib/advlock.so")
  [ -z "$shlibs" ] || depends="$depends, $shlibs"
  size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
  cat >"$root/DEBIAN/control" <<CONTROL
Package: $pkg
Source: advlock
Version: $debversion
Architecture: amd64
Maintainer: advlock maintainers <advlock@localhost.invalid>
Installed-Size: $size
Depends: $depends
Section: database
Priority: optional
Description: safe, observable advisory locks for PostgreSQL $major
 advlock makes PostgreSQL advisory locks safe and observable from plain SQL:
 stable namespaced keys (advlock_key), bounded server-side waits
 (advlock_try_with_timeout), and the advlock_holders view of who holds what.
 .
 This package contains the extension for PostgreSQL $major. Enable it in a
 database with CREATE EXTENSION advlock.
CONTROL
  (cd "$root" && find usr -type f -printf '%P\n' | sort | sed 's|^|usr/|' | xargs md5sum) >"$root/DEBIAN/md5sums"
  deb="$out/${pkg}_${debversion}_amd64.deb"
  fakeroot dpkg-deb --build -Zxz --root-owner-group "$root" "$deb" >/dev/null
  log "wrote $deb (Depends: $depends)"
  if command -v lintian >/dev/null; then
    # Suppressed: tags about an archive upload (closing an ITP bug, the maintainer's mail host),
    # which a locally built package has not got.
    lintian --tag-display-limit 0 --suppress-tags initial-upload-closes-no-bugs,bogus-mail-host \
      "$deb" | tee "$stage/lintian.txt" || true
    if grep -q '^E:' "$stage/lintian.txt"; then echo "package: lintian reports errors for $deb" >&2; exit 1; fi
  fi

  # --- plain tarball ----------------------------------------------------------------------
  name="advlock-$version-pg$major-linux-x86_64"
  tree="$stage/$name"
  install -d "$tree/lib" "$tree/extension"
  install -m 755 "$root/usr/lib/postgresql/$major/lib/advlock.so" "$tree/lib/"
  install -m 644 "$root/usr/share/postgresql/$major/extension/"* "$tree/extension/"
  install -m 644 LICENSE "$tree/"
  install -m 755 packaging/install.sh "$tree/install.sh"
  sed -i "s/^ADVLOCK_MAJOR=.*/ADVLOCK_MAJOR=$major/; s/^ADVLOCK_VERSION=.*/ADVLOCK_VERSION=$version/" "$tree/install.sh"
  tar -C "$stage" --owner=0 --group=0 --sort=name -czf "$out/$name.tar.gz" "$name"
  log "wrote $out/$name.tar.gz"
done
