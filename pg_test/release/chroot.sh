# shellcheck shell=bash
# Clean Debian systems for the release tests, made by debootstrap once and cached between runs
# (pg_test/package/run.sh installs its .deb of 15 and 17 in the bookworm and trixie trees). Sourced.
#   chroot_root SUITE            the tree: $ADVLOCK_CHROOT_BASE/advlock-SUITE-root (default /var/tmp)
#   chroot_ensure SUITE MAJOR    debootstrap --variant=minbase SUITE with Debian's postgresql-MAJOR
#                                from this machine's Debian mirror (scripts/majors.sh debian_mirror),
#                                unless the cached tree has that server already
#   chroot_mount SUITE / chroot_umount SUITE   /proc and /dev (bind) inside the tree
# A run killed while a tree was in use may have left /proc and /dev mounted in it: they are
# unmounted before anything else, and a tree is never removed while something is mounted below
# it (rm -rf through a bind mount of /dev would delete the host's device nodes).
chroot_root() { echo "${ADVLOCK_CHROOT_BASE:-/var/tmp}/advlock-$1-root"; }

chroot_umount() {
  local root m; root=$(chroot_root "$1")
  for m in dev proc; do
    if mountpoint -q "$root/$m"; then umount "$root/$m" || umount -l "$root/$m"; fi
  done
}

chroot_mount() {
  local root; root=$(chroot_root "$1")
  mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
  mountpoint -q "$root/dev" || mount --bind /dev "$root/dev"
}

chroot_ensure() {
  local suite=$1 major=$2 root script log
  root=$(chroot_root "$suite")
  chroot_umount "$suite"
  [ -x "$root/usr/lib/postgresql/$major/bin/postgres" ] && return 0
  echo "chroot: debootstrap $suite (minbase + postgresql-$major) into $root"
  if grep -q " $root/" /proc/mounts; then echo "chroot: something is still mounted under $root" >&2; return 1; fi
  rm -rf "$root"
  # debootstrap names the suites it knows; a newer one (forky) is bootstrapped like sid.
  script=/usr/share/debootstrap/scripts/$suite
  [ -e "$script" ] || script=/usr/share/debootstrap/scripts/sid
  log=/tmp/advlock-debootstrap-$suite.log
  debootstrap --variant=minbase --include="postgresql-$major" "$suite" "$root" "$(debian_mirror)" "$script" \
    >"$log" 2>&1 || { tail -20 "$log"; return 1; }
  [ -x "$root/usr/lib/postgresql/$major/bin/postgres" ]
}
