#!/usr/bin/env bash
# The PostgreSQL 15 .deb on a stock Debian bookworm (glibc 2.36), not on this build machine,
# whose glibc is trixie's 2.41: a minimal bookworm with Debian's postgresql-15 is debootstrapped
# once into $ADVLOCK_BOOKWORM_ROOT, the .deb is installed there with dpkg -i (its Depends must be
# satisfiable by bookworm), the server runs inside the chroot (preloaded) and this machine's
# pg_regress runs the regress suite against it through the chroot's unix socket. Then dpkg -r,
# and no advlock file may be left.
# Writes "pg15-bookworm-regress" and "pg15-bookworm" lines to $ADVLOCK_SUMMARY.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$(dirname "$here")")"
. "$repo/scripts/majors.sh"
. "$repo/scripts/helpers.sh"
summary=${ADVLOCK_SUMMARY:-/dev/null}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)
root=${ADVLOCK_BOOKWORM_ROOT:-/var/tmp/advlock-bookworm-root}
deb="postgresql-15-advlock_${version}-1_amd64.deb"
port=${ADVLOCK_BOOKWORM_PORT:-5460}
in_root() { chroot "$root" "$@"; }
as_pg() { chroot --userspec=postgres:postgres "$root" "$@"; }
check_name=bookworm
. "$repo/pg_test/check.sh"
cleanup() {
  [ -f "$root/tmp/pgdata/postmaster.pid" ] && as_pg /usr/lib/postgresql/15/bin/pg_ctl -D /tmp/pgdata -m immediate -w stop >/dev/null 2>&1
  in_root dpkg -r postgresql-15-advlock >/dev/null 2>&1
  umount "$root/dev" "$root/proc" 2>/dev/null
  echo "pg15-bookworm $passed $failed" >>"$summary"
  echo "bookworm: $passed checks passed, $failed failed"
}

# A run killed while the chroot was in use may have left /proc and /dev mounted in it: unmount
# them before anything else, and never remove the tree while something is mounted below it
# (rm -rf through a bind mount of /dev would delete the host's device nodes).
for m in dev proc; do mountpoint -q "$root/$m" && umount "$root/$m"; done
if [ ! -x "$root/usr/lib/postgresql/15/bin/postgres" ]; then
  echo "bookworm: debootstrap bookworm (minbase + postgresql-15) into $root"
  if grep -q " $root/" /proc/mounts; then echo "bookworm: something is still mounted under $root" >&2; exit 1; fi
  rm -rf "$root"
  debootstrap --variant=minbase --include=postgresql-15 bookworm "$root" "$(debian_mirror)" \
    >/tmp/advlock-debootstrap.log 2>&1 || { tail -20 /tmp/advlock-debootstrap.log; echo "pg15-bookworm 0 1" >>"$summary"; exit 1; }
fi
trap cleanup EXIT
mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
mountpoint -q "$root/dev" || mount --bind /dev "$root/dev"

check "the chroot is a stock bookworm: glibc 2.36" bash -c "chroot '$root' ldd --version | head -1 | grep -q ' 2\\.36\$'"
cp "$repo/target/packages/$deb" "$root/tmp/"
check "dpkg -i $deb on bookworm (Depends satisfied there)" in_root dpkg -i "/tmp/$deb"
# (ldd -r also lists the server's own symbols as undefined: postgres provides them when it loads
# the library. A missing library or glibc symbol version shows as "not found".)
check "advlock.so finds every library and glibc symbol version on bookworm" \
  bash -c "chroot '$root' ldd -r /usr/lib/postgresql/15/lib/advlock.so >/dev/null 2>&1; ! chroot '$root' ldd -r /usr/lib/postgresql/15/lib/advlock.so 2>&1 | grep 'not found'"

rm -rf "$root/tmp/pgdata"; mkdir -p "$root/tmp/pgdata"; in_root chown postgres /tmp/pgdata
as_pg /usr/lib/postgresql/15/bin/initdb -D /tmp/pgdata -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-sync >/dev/null
printf '%s\n' "port = $port" "listen_addresses = ''" "unix_socket_directories = '/tmp'" \
  "shared_preload_libraries = 'advlock'" >>"$root/tmp/pgdata/postgresql.conf"
check "PostgreSQL 15 starts on bookworm with advlock preloaded" \
  as_pg /usr/lib/postgresql/15/bin/pg_ctl -D /tmp/pgdata -l /tmp/postgres.log -w start

# This machine's pg_regress (15) against the chroot's server, through its socket directory.
work=$(mktemp -d /tmp/advlock-bookworm-regress.XXXXXX)
cp -r "$repo/pg_test/regress" "$work/input"; chmod -R a+rwX "$work"
tests=()
for f in "$repo"/pg_test/regress/sql/*.sql; do tests+=("$(basename "$f" .sql)"); done
regress=$(pgxs_test_dir 15)/regress/pg_regress
# shellcheck disable=SC2024  # the log is this script's (root's), in a directory open to all
sudo -u postgres "$regress" --bindir=/usr/lib/postgresql/15/bin --host="$root/tmp" --port="$port" --user=postgres \
  --inputdir="$work/input" --outputdir="$work/out" --dbname=advlock_regress --load-extension=advlock "${tests[@]}" \
  >"$work/regress.log" 2>&1
rc=$?
cat "$work/regress.log"
read -r rp rf < <(count_tap "$work/regress.log")
[ $rc -eq 0 ] || [ "$rf" -gt 0 ] || rf=1
echo "pg15-bookworm-regress $rp $rf" >>"$summary"
[ $rc -eq 0 ] || { [ -f "$work/out/regression.diffs" ] && head -100 "$work/out/regression.diffs"; }

as_pg /usr/lib/postgresql/15/bin/pg_ctl -D /tmp/pgdata -m fast -w stop >/dev/null
check "dpkg -r postgresql-15-advlock on bookworm" in_root dpkg -r postgresql-15-advlock
check "no advlock file left in the bookworm tree" \
  bash -c "[ -z \"\$(find '$root/usr/lib/postgresql/15/lib' '$root/usr/share/postgresql/15/extension' -name 'advlock*')\" ]"
[ $failed -eq 0 ] && [ $rc -eq 0 ]
