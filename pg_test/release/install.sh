#!/usr/bin/env bash
# One clean Debian system, as a DBA would use the release: the chroot SUITE (debootstrap, cached)
# with Debian's own postgresql-MAJOR gets the release's apt repository as a `file:` source with
# signed-by= the shipped keyring. A wrong keyring and a Release altered after signing must make
# `apt-get update` fail; with the shipped keyring it succeeds, `apt-get install
# postgresql-MAJOR-advlock` installs this version, a cluster runs CREATE EXTENSION advlock, the
# key vectors and the regress suite (this machine's pg_regress of MAJOR through the chroot's
# socket), not preloaded and preloaded; `apt-get purge` leaves no file behind.
# Writes "pgMAJOR-apt-SUITE", "pgMAJOR-apt-SUITE-regress" and "...-regress-preload" lines to
# $ADVLOCK_SUMMARY.
# Usage: pg_test/release/install.sh SUITE MAJOR RELEASE_DIR WRONG_KEYRING
# shellcheck source-path=SCRIPTDIR
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$(dirname "$here")")"
# shellcheck source=../../scripts/majors.sh
. "$repo/scripts/majors.sh"
. "$here/chroot.sh"
suite=$1 major=$2 dist=$3 wrong_keyring=$4
summary=${ADVLOCK_SUMMARY:-/dev/null}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)
pkg=postgresql-$major-advlock
port=${ADVLOCK_APT_PORT:-$((5470 + major - 15))}
check_name="apt-$suite"
# shellcheck source=../check.sh
. "$repo/pg_test/check.sh"
# shellcheck source=common.sh
. "$here/common.sh"
status=0

chroot_ensure "$suite" "$major" || { echo "pg$major-apt-$suite 0 1" >>"$summary"; exit 1; }
cleanup() {
  pg_kill
  apt_get purge "$pkg" >/dev/null 2>&1
  drop_repo
  chroot_umount "$suite"
  echo "pg$major-apt-$suite $passed $failed" >>"$summary"
  echo "apt-$suite: $passed checks passed, $failed failed"
}
trap cleanup EXIT
chroot_mount "$suite"
check "the chroot is Debian $suite with Debian's postgresql-$major and no advlock" \
  bash -c "chroot '$root' dpkg-query -W -f='\${Version}\\n' postgresql-$major && ! chroot '$root' dpkg -s $pkg >/dev/null 2>&1"
echo "apt-$suite: $(in_root ldd --version | head -1), PostgreSQL $(in_root "$pgbin/postgres" --version | awk '{print $3}')"

# --- the signature is verified ------------------------------------------------------------------
update_fails() {  # update_fails WHAT: apt-get update exits non-zero and names the signature problem
  local out; out=$(apt_get update 2>&1); local rc=$?
  echo "$out" | grep -E '^(E|W|Err):' | head -3
  [ $rc -ne 0 ] && echo "$out" | grep -qE "$1" && ! apt_get install --simulate "$pkg" >/dev/null 2>&1
}
use_repo "$dist/apt" "$wrong_keyring"
check "apt-get update fails with a wrong keyring in signed-by= (and nothing is installable)" \
  update_fails 'NO_PUBKEY|Missing key'
drop_repo
use_repo "$dist/apt" "$dist/advlock-archive-keyring.gpg"
sed -i 's/^Label: advlock$/Label: advlocks/' "$root/srv/advlock-apt/dists/${ADVLOCK_APT_SUITE:-stable}/InRelease"
check "apt-get update fails when InRelease was altered after signing" update_fails 'BADSIG|manipulated'
drop_repo

use_repo "$dist/apt" "$dist/advlock-archive-keyring.gpg"
check "apt-get update with signed-by= the shipped keyring (signature verified)" apt_get update
check "apt offers $pkg $version-1 from the repository" \
  bash -c "chroot '$root' apt-cache policy $pkg | grep -E '^  Candidate: $version-1\$'"
check "apt-get install $pkg" apt_get install "$pkg"
check "$pkg $version-1 is installed" \
  bash -c "[ \"\$(chroot '$root' dpkg-query -W -f='\${db:Status-Status} \${Version}' $pkg)\" = 'installed $version-1' ]"
check "advlock.so finds every library and glibc symbol version on $suite" \
  bash -c "! chroot '$root' ldd -r $pgbin/../lib/advlock.so 2>&1 | grep 'not found'"
mapfile -t files < <(in_root dpkg -L "$pkg" | while read -r f; do [ -f "$root$f" ] && echo "$f"; done)
has_file() { printf '%s\n' "${files[@]}" | grep -qx "$1"; }
package_files() {
  has_file "/usr/lib/postgresql/$major/lib/advlock.so" && has_file "/usr/share/postgresql/$major/extension/advlock.control" &&
    has_file "/usr/share/postgresql/$major/extension/advlock--$version.sql"
}
check "the package holds advlock.so, the control file and the install script" package_files

# --- a cluster, not preloaded and preloaded -----------------------------------------------------------
create_extension() {
  psql_in "$1" -c 'CREATE EXTENSION advlock' &&
    [ "$(psql_in "$1" -c "SELECT extversion FROM pg_extension WHERE extname = 'advlock'")" = "$version" ]
}
preloaded() { [ "$(psql_in postgres -c 'SHOW shared_preload_libraries')" = advlock ]; }
for conf in plain preloaded; do
  settings=(); [ $conf = preloaded ] && settings=("shared_preload_libraries = 'advlock'")
  check "PostgreSQL $major starts on $suite ($conf)" pg_start "${settings[@]}"
  psql_in postgres -c "CREATE DATABASE advlock_apt" >/dev/null
  check "CREATE EXTENSION advlock ($conf) installs version $version" create_extension advlock_apt
  [ $conf = plain ] || check "advlock is in shared_preload_libraries" preloaded
  check "every key vector ($vectors_total) computed by the installed extension ($conf)" vectors_ok advlock_apt
  sfx=""; [ $conf = preloaded ] && sfx=-preload
  regress "pg$major-apt-$suite-regress$sfx" || status=1
  check "PostgreSQL $major stops ($conf)" pg_stop
done
rm -rf "$root/tmp/pgdata"

# --- purge ----------------------------------------------------------------------------------------------
check "apt-get purge $pkg" apt_get purge "$pkg"
check "dpkg knows nothing of $pkg afterwards (not even config-files)" \
  bash -c "[ -z \"\$(chroot '$root' dpkg-query -W -f='\${db:Status-Status}' $pkg 2>/dev/null | grep -v '^not-installed\$')\" ]"
gone() { local f left=0; for f in "${files[@]}"; do [ -e "$root$f" ] && { echo "left: $f"; left=1; }; done; [ $left = 0 ]; }
check "none of the package's ${#files[@]} files is left" gone
none_left() { local left; left=$(advlock_left); [ -z "$left" ] || { echo "left: $left"; return 1; }; }
check "no file named after advlock left in the tree (outside the apt source and keyring the DBA added)" none_left
[ "$failed" -eq 0 ] && [ $status -eq 0 ]
