#!/usr/bin/env bash
# The package test for one major: installs advlock the way a DBA would and runs the regress and
# isolation suites (plain and preloaded) against that install, then removes it. This machine's
# PostgreSQL trees are never touched (a server running from them keeps its library):
#   15, 17  (Debian's servers): in a clean Debian system with Debian's postgresql-NN, debootstrapped
#           once and cached (pg_test/release/chroot.sh, shared with pg_test/release): bookworm for
#           15 (glibc 2.36, the oldest the packages support), trixie for 17. `dpkg -i` the .deb
#           there, check its Depends, its file list and that advlock.so finds every library and
#           glibc symbol version there; the server runs in that system and this machine's
#           pg_regress / pg_isolation_regress of NN test it through its socket; `dpkg -r`, and no
#           advlock file may be left.
#   16, 18  (servers from PyPI wheels, no Debian package to depend on): the tarball's install.sh
#           into a copy of the wheel tree (scripts/majors.sh copy_pg_tree), test, `install.sh
#           --uninstall`, no advlock file left. Also checks that install.sh refuses a pg_config
#           of another major (that major's test tree).
# Writes "pgNN-pkg-<suite> passed failed" and "pgNN-package passed failed" lines to $ADVLOCK_SUMMARY.
# Usage: pg_test/package/run.sh MAJOR        (after scripts/package.sh MAJOR)
#   ADVLOCK_PACKAGE_PORT: the server's port (default 5460 + MAJOR - 15)
# shellcheck source-path=SCRIPTDIR
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$(dirname "$here")")"
# shellcheck source=../../scripts/majors.sh
. "$repo/scripts/majors.sh"
major=$1
summary=${ADVLOCK_SUMMARY:-/dev/null}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)
deb="postgresql-$major-advlock_${version}-1_amd64.deb"
tarball="$repo/target/packages/advlock-$version-pg$major-linux-x86_64.tar.gz"
port=${ADVLOCK_PACKAGE_PORT:-$((5460 + major - 15))}
status=0
check_name=package-test
# shellcheck source=../check.sh
. "$repo/pg_test/check.sh"
report() {
  echo "pg$major-package $passed $failed" >>"$summary"
  echo "package-test: PostgreSQL $major: $passed checks passed, $failed failed"
}

if major_from_debian "$major"; then
  # shellcheck source=../release/chroot.sh
  . "$repo/pg_test/release/chroot.sh"
  case $major in 15) suite=bookworm ;; 17) suite=trixie ;; esac
  # shellcheck source=../release/common.sh
  . "$repo/pg_test/release/common.sh"
  pkg=postgresql-$major-advlock
  libdir=/usr/lib/postgresql/$major/lib extdir=/usr/share/postgresql/$major/extension
  advlock_files() { find "$root$libdir" "$root$extdir" -maxdepth 1 -name 'advlock*' 2>/dev/null | sed "s|^$root||" | sort; }
  chroot_ensure "$suite" "$major" || { failed=$((failed + 1)); report; exit 1; }
  cleanup() { pg_kill; in_root dpkg -P "$pkg" >/dev/null 2>&1; chroot_umount "$suite"; report; }
  trap cleanup EXIT
  chroot_mount "$suite"
  in_root dpkg -P "$pkg" >/dev/null 2>&1   # a run killed before its cleanup
  check "Debian $suite with Debian's postgresql-$major and no advlock file" \
    bash -c "grep -qx 'VERSION_CODENAME=$suite' '$root/etc/os-release' && chroot '$root' dpkg-query -W postgresql-$major >/dev/null && [ -z \"\$(find '$root$libdir' '$root$extdir' -maxdepth 1 -name 'advlock*')\" ]"
  # 15's .deb is the one for the oldest Debian the packages support: bookworm's glibc 2.36.
  [ "$suite" != bookworm ] || check "bookworm's glibc is 2.36" bash -c "chroot '$root' ldd --version | head -1 | grep -q ' 2\.36\$'"
  check ".deb exists (target/packages/$deb)" test -f "$repo/target/packages/$deb"
  cp "$repo/target/packages/$deb" "$root/tmp/"
  check "dpkg -i $deb on $suite (Depends satisfied there)" in_root dpkg -i "/tmp/$deb"
  check "dpkg -s says installed" bash -c "chroot '$root' dpkg -s $pkg | grep -q '^Status: install ok installed'"
  check "Depends names postgresql-$major and libc6" bash -c \
    "chroot '$root' dpkg -s $pkg | grep -E '^Depends: postgresql-$major, .*libc6 \\(>= [0-9.]+\\)'"
  check "advlock.so is where PostgreSQL $major loads it" test -f "$root$libdir/advlock.so"
  check "control and install script are in $extdir" test -f "$root$extdir/advlock.control" -a -f "$root$extdir/advlock--$version.sql"
  check "dpkg -L lists exactly the installed advlock files" bash -c \
    "diff <(chroot '$root' dpkg -L $pkg | grep -E '/advlock[^/]*\$' | grep -v /usr/share/doc | sort) <(find '$root$libdir' '$root$extdir' -maxdepth 1 -name 'advlock*' | sed 's|^$root||' | sort)"
  # (ldd -r also lists the server's own symbols as undefined: postgres provides them when it loads
  # the library. A missing library or glibc symbol version shows as "not found".)
  check "advlock.so finds every library and glibc symbol version on $suite" \
    bash -c "! chroot '$root' ldd -r $libdir/advlock.so 2>&1 | grep 'not found'"
  for conf in plain preloaded; do
    extra=(); prefix="pg$major-pkg-"
    [ $conf = preloaded ] && extra=("shared_preload_libraries = 'advlock'") prefix="pg$major-pkg-preload-"
    pg_kill
    # (TCP on loopback too: a spec connects back through dblink to host=127.0.0.1.)
    if check "PostgreSQL $major starts on $suite ($conf)" \
         pg_start "max_connections = 200" "listen_addresses = '127.0.0.1'" "${extra[@]}"; then
      regress "${prefix}regress" || status=1
      regress "${prefix}isolation" isolation || status=1
    else
      in_root tail -20 /tmp/postgres.log; status=1
    fi
  done
  pg_kill
  check "dpkg -r $pkg" in_root dpkg -r "$pkg"
  check "dpkg knows nothing of the package afterwards" bash -c \
    "! chroot '$root' dpkg -s $pkg 2>/dev/null | grep -q '^Status: .* installed'"
  left=$(advlock_files)
  check "no advlock file left in $libdir or $extdir" test -z "$left"
  [ -z "$left" ] || echo "left behind: $left"
else
  tree=$(mktemp -d /tmp/advlock-package-tree.XXXXXX)
  unpack=$(mktemp -d /tmp/advlock-tarball.XXXXXX)
  trap 'rm -rf "$tree" "$unpack"; report' EXIT
  check "a copy of PostgreSQL $major's tree ($(major_source "$major")), without advlock" copy_pg_tree "$major" "$tree"
  pgc=$(copied_pg_config "$major" "$tree")
  libdir=$("$pgc" --pkglibdir) extdir=$("$pgc" --sharedir)/extension
  advlock_files() { find "$libdir" "$extdir" -maxdepth 1 -name 'advlock*' 2>/dev/null | sort; }
  check "tarball exists ($tarball)" test -f "$tarball"
  tar -C "$unpack" -xzf "$tarball"
  installer="$unpack/advlock-$version-pg$major-linux-x86_64/install.sh"
  other=$(for m in "${ADVLOCK_MAJORS[@]}"; do [ "$m" != "$major" ] && [ -x "$(test_pg_config_for "$m")" ] && echo "$m" && break; done)
  if [ -n "$other" ]; then
    check "install.sh refuses PostgreSQL $other's pg_config (exit status 1)" bash -c \
      "PG_CONFIG='$(test_pg_config_for "$other")' '$installer'; [ \$? = 1 ]"
  fi
  check "install.sh into PostgreSQL $major" env PG_CONFIG="$pgc" "$installer"
  check "advlock.so is where PostgreSQL $major loads it" test -f "$libdir/advlock.so"
  for conf in plain preloaded; do
    sub=$(mktemp /tmp/advlock-pkg-summary.XXXXXX)
    preload=""; prefix="pg$major-pkg-"
    [ $conf = preloaded ] && preload="shared_preload_libraries = 'advlock'" prefix="pg$major-pkg-preload-"
    ADVLOCK_PG_MAJOR=$major ADVLOCK_PG_CONFIG=$pgc ADVLOCK_SUMMARY=$sub ADVLOCK_TEST_CONF=$preload \
      "$repo/pg_test/run.sh" regress isolation || status=1
    sed "s/^/$prefix/" "$sub" >>"$summary"; rm -f "$sub"
  done
  check "install.sh --uninstall" env PG_CONFIG="$pgc" "$installer" --uninstall
  left=$(advlock_files)
  check "no advlock file left in $libdir or $extdir" test -z "$left"
  [ -z "$left" ] || echo "left behind: $left"
fi
[ $status -eq 0 ] && [ $failed -eq 0 ]
