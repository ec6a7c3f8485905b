#!/usr/bin/env bash
# The package test for one major: installs advlock the way a DBA would and runs the regress and
# isolation suites (plain and preloaded) against that install, then removes it.
#   15, 17  (servers from Debian): remove what the build installed, `dpkg -i` the .deb, check its
#           file list and Depends, test, `dpkg -r`, and check that no advlock file is left.
#   16, 18  (servers from PyPI wheels, no Debian package to depend on): the tarball's install.sh
#           into that tree, test, `install.sh --uninstall`, check that no advlock file is left.
# Also checks that install.sh refuses a pg_config of another major.
# Writes "pgNN-pkg-<suite> passed failed" lines to $ADVLOCK_SUMMARY.
# Usage: pg_test/package/run.sh MAJOR        (after scripts/package.sh MAJOR)
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$(dirname "$here")")"
. "$repo/scripts/majors.sh"
major=$1
summary=${ADVLOCK_SUMMARY:-/dev/null}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)
pgc=$(pg_config_for "$major") || exit 1
libdir=$("$pgc" --pkglibdir) extdir=$("$pgc" --sharedir)/extension
deb="$repo/target/packages/postgresql-$major-advlock_${version}-1_amd64.deb"
tarball="$repo/target/packages/advlock-$version-pg$major-linux-x86_64.tar.gz"
status=0
check_name=package-test
. "$repo/pg_test/check.sh"
advlock_files() { find "$libdir" "$extdir" -maxdepth 1 -name 'advlock*' 2>/dev/null | sort; }
none_left() { local left; left=$(advlock_files); [ -z "$left" ] || { echo "left behind: $left"; return 1; }; }

# Start from a server tree without advlock, as on a DBA's machine (cargo pgrx install put one there).
rm -f "$libdir"/advlock.so "$extdir"/advlock.control "$extdir"/advlock--*.sql
check "PostgreSQL $major tree has no advlock before the install" none_left

if major_from_debian "$major"; then
  check ".deb exists ($deb)" test -f "$deb"
  dpkg -r "postgresql-$major-advlock" >/dev/null 2>&1 || true
  check "dpkg -i $(basename "$deb")" dpkg -i "$deb"
  check "dpkg -s says installed" bash -c "dpkg -s postgresql-$major-advlock | grep -q '^Status: install ok installed'"
  check "Depends names postgresql-$major and libc6" bash -c \
    "dpkg -s postgresql-$major-advlock | grep -E '^Depends: postgresql-$major, .*libc6 \\(>= [0-9.]+\\)'"
  check "advlock.so is where PostgreSQL $major loads it" test -f "$libdir/advlock.so"
  check "control and install script are in $extdir" test -f "$extdir/advlock.control" -a -f "$extdir/advlock--$version.sql"
  check "dpkg -L lists exactly the installed advlock files" bash -c \
    "diff <(dpkg -L postgresql-$major-advlock | grep -E '/advlock[^/]*\$' | grep -v /usr/share/doc | sort) <(find '$libdir' '$extdir' -maxdepth 1 -name 'advlock*' | sort)"
else
  check "tarball exists ($tarball)" test -f "$tarball"
  unpack=$(mktemp -d /tmp/advlock-tarball.XXXXXX)
  tar -C "$unpack" -xzf "$tarball"
  tree="$unpack/advlock-$version-pg$major-linux-x86_64"
  other=$(for m in "${ADVLOCK_MAJORS[@]}"; do [ "$m" != "$major" ] && major_installed "$m" && echo "$m" && break; done)
  if [ -n "$other" ]; then
    check "install.sh refuses PostgreSQL $other's pg_config (exit status 1)" bash -c \
      "PG_CONFIG='$(pg_config_for "$other")' '$tree/install.sh'; [ \$? = 1 ]"
  fi
  check "install.sh into PostgreSQL $major ($(major_source "$major"))" env PG_CONFIG="$pgc" "$tree/install.sh"
  check "advlock.so is where PostgreSQL $major loads it" test -f "$libdir/advlock.so"
fi

for conf in plain preloaded; do
  sub=$(mktemp /tmp/advlock-pkg-summary.XXXXXX)
  extra=""; [ $conf = preloaded ] && extra="shared_preload_libraries = 'advlock'"
  ADVLOCK_PG_MAJOR=$major ADVLOCK_SUMMARY=$sub ADVLOCK_TEST_CONF=$extra \
    "$repo/pg_test/run.sh" regress isolation || status=1
  prefix="pg$major-pkg-"; [ $conf = preloaded ] && prefix="pg$major-pkg-preload-"
  sed "s/^/$prefix/" "$sub" >>"$summary"; rm -f "$sub"
done

if major_from_debian "$major"; then
  check "dpkg -r postgresql-$major-advlock" dpkg -r "postgresql-$major-advlock"
  check "dpkg knows nothing of the package afterwards" bash -c \
    "! dpkg -s postgresql-$major-advlock 2>/dev/null | grep -q '^Status: .* installed'"
else
  check "install.sh --uninstall" env PG_CONFIG="$pgc" "$tree/install.sh" --uninstall
  rm -rf "$unpack"
fi
check "no advlock file left in $libdir or $extdir" none_left

echo "pg$major-package $passed $failed" >>"$summary"
echo "package-test: PostgreSQL $major: $passed checks passed, $failed failed"
[ $status -eq 0 ] && [ $failed -eq 0 ]
