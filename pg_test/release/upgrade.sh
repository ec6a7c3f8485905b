#!/usr/bin/env bash
# The upgrade through apt, as a DBA lives it, in the trixie chroot with Debian's postgresql-17:
# a repository holding an earlier release (the .deb built from its commit by old_deb.sh) is
# installed and used (a cluster with that library preloaded, a database at that version, a table
# using advlock_key, a session holding a lock); the repository then holds this version and
# `apt-get upgrade` replaces the package while the cluster runs. The running cluster keeps
# serving (it has the old library loaded) and the lock stays held; then what docs/install-apt.md
# tells the DBA: restart, ALTER EXTENSION advlock UPDATE. The database reaches this version and its
# extension objects equal a fresh install's (the catalog queries of pg_test/upgrade/test_upgrade.py).
# Writes a "pg17-apt-upgrade passed failed" line to $ADVLOCK_SUMMARY.
# Usage: pg_test/release/upgrade.sh RELEASE_DIR SIGNING_KEY_FILE [OLD_COMMIT]
# shellcheck source-path=SCRIPTDIR
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$(dirname "$here")")"
# shellcheck source=../../scripts/majors.sh
. "$repo/scripts/majors.sh"
. "$here/chroot.sh"
dist=$1 key=$2 old_commit=${3:-${ADVLOCK_OLD_RELEASE:-$(awk '$1 == "0.3.0" { print $2 }' "$repo/sql/archive/RELEASES")}}
suite=trixie major=17
summary=${ADVLOCK_SUMMARY:-/dev/null}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)
old_version=$(git -C "$repo" show "$old_commit:Cargo.toml" | sed -n 's/^version = "\(.*\)"/\1/p' | head -1)
pkg=postgresql-$major-advlock
port=${ADVLOCK_APT_UPGRADE_PORT:-5479}
check_name="apt-upgrade"
# shellcheck source=../check.sh
. "$repo/pg_test/check.sh"
# shellcheck source=common.sh
. "$here/common.sh"
work=$(mktemp -d /tmp/advlock-apt-upgrade.XXXXXX)
holder=""

fail_now() { echo "apt-upgrade: FAIL $1"; failed=$((failed + 1)); exit 1; }
cleanup() {
  [ -z "$holder" ] || kill "$holder" 2>/dev/null
  pg_kill
  apt_get purge "$pkg" >/dev/null 2>&1
  drop_repo
  chroot_umount "$suite"
  rm -rf "$work"
  echo "pg$major-apt-upgrade $passed $failed" >>"$summary"
  echo "apt-upgrade: $passed checks passed, $failed failed"
}
trap cleanup EXIT
[ "$old_version" != "$version" ] || fail_now "the old release ($old_commit) has this version ($version)"
old_deb=$("$here/old_deb.sh" "$old_commit" "$major") || fail_now "build the $old_version .deb from $old_commit"
ADVLOCK_SIGNING_KEY=$key "$repo/scripts/apt-repo.sh" "$work/old-apt" "$old_deb" >/dev/null || fail_now "the $old_version repository"
chroot_ensure "$suite" "$major" || fail_now "debootstrap $suite"
chroot_mount "$suite"

# --- the earlier release, installed and in use ----------------------------------------------------------
use_repo "$work/old-apt" "$work/old-apt/advlock-archive-keyring.gpg"
check "apt-get update (the $old_version repository)" apt_get update
check "apt-get install $pkg ($old_version-1)" apt_get install "$pkg"
installed() { [ "$(in_root dpkg-query -W -f="\${db:Status-Status} \${Version}" "$pkg")" = "installed $1" ]; }
check "$pkg $old_version-1 is installed" installed "$old_version-1"
check "a cluster with the $old_version library preloaded starts" pg_start "shared_preload_libraries = 'advlock'"
psql_in postgres -c "CREATE DATABASE advlock_up" >/dev/null
extversion() { psql_in "$1" -c "SELECT extversion FROM pg_extension WHERE extname = 'advlock'"; }
create_old() { psql_in advlock_up -c "CREATE EXTENSION advlock" && [ "$(extversion advlock_up)" = "$old_version" ]; }
check "CREATE EXTENSION advlock is $old_version" create_old
psql_in advlock_up -c "CREATE TABLE jobs (ns text, id bigint, k bigint GENERATED ALWAYS AS (advlock_key(ns, id)) STORED)" \
  -c "INSERT INTO jobs VALUES ('account', 42)" >/dev/null
# A session holding a lock across the upgrade, as an application's would.
as_pg "$pgbin/psql" -X -q -h /tmp -p "$port" -U postgres -d advlock_up \
  -c "SELECT pg_advisory_lock(advlock_key('rollup', 'nightly'))" -c "SELECT pg_sleep(600)" >/dev/null 2>&1 &
holder=$!
held() {
  local _
  for _ in $(seq 50); do
    [ "$(psql_in advlock_up -c "SELECT count(*) FROM advlock_holders WHERE key = advlock_key('rollup', 'nightly') AND granted")" = 1 ] && return 0
    sleep 0.1
  done
  return 1
}
check "a session holds advlock_key('rollup', 'nightly')" held
postmaster_pid() { head -1 "$root/tmp/pgdata/postmaster.pid"; }
pid_before=$(postmaster_pid)

# --- apt-get upgrade while it runs ------------------------------------------------------------------------
drop_repo
use_repo "$dist/apt" "$dist/advlock-archive-keyring.gpg"
check "apt-get update (the repository now holds $version)" apt_get update
upgradable() { apt_get -s upgrade | grep -E "^Inst $pkg \\[$old_version-1\\] \\($version-1 "; }
check "apt-get -s upgrade would replace $pkg $old_version-1 by $version-1" upgradable
check "apt-get upgrade" apt_get upgrade
check "$pkg $version-1 is installed" installed "$version-1"
same_postmaster() { [ "$(postmaster_pid)" = "$pid_before" ] && as_pg "$pgbin/pg_ctl" -D /tmp/pgdata status >/dev/null; }
check "the cluster kept running through the upgrade (same postmaster)" same_postmaster
check "the session's lock is still held" held
check "a new session works before the restart" vectors_ok advlock_up
# Which advlock.so a new session runs before the restart: the preloaded one it inherits from the
# postmaster (whose file apt replaced: "(deleted)" in its memory map), and the new file if
# PostgreSQL loads that too when a function names $libdir/advlock (it compares files by inode).
maps_sql="SELECT advlock_key('rollup', 'nightly') IS NOT NULL;
  SELECT count(*) FILTER (WHERE l LIKE '%advlock.so (deleted)') || ' ' || count(*) FILTER (WHERE l LIKE '%advlock.so')
    FROM (SELECT DISTINCT substring(l FROM '/.*') AS l FROM regexp_split_to_table(pg_read_file('/proc/self/maps'), E'\\n') l) m"
mapped() { local got; got=$(psql_in advlock_up -c "$maps_sql" | tail -1); [ "$got" = "$1" ] || { echo "maps advlock.so: $got (replaced file, new file)"; return 1; }; }
check "until the restart, new sessions run the old library only (the replaced file, not the new one)" mapped "1 0"
versions() { [ "$(psql_in advlock_up -c "SELECT installed_version || ' ' || default_version FROM pg_available_extensions WHERE name = 'advlock'")" = "$old_version $version" ]; }
check "before ALTER EXTENSION: installed $old_version, available $version" versions

# --- what the DBA does next: restart, ALTER EXTENSION advlock UPDATE -------------------------------------
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null; holder=""
check "restart" pg_restart
check "after the restart, sessions run the new library only" mapped "0 1"
update_ext() { psql_in advlock_up -c "ALTER EXTENSION advlock UPDATE" && [ "$(extversion advlock_up)" = "$version" ]; }
check "ALTER EXTENSION advlock UPDATE reaches $version" update_ext
jobs_key() { [ "$(psql_in advlock_up -c "SELECT k FROM jobs")" = 7700915891107303510 ]; }
check "the table's generated advlock_key column is unchanged" jobs_key
check "every key vector after the update" vectors_ok advlock_up
psql_in postgres -c "CREATE DATABASE advlock_fresh" >/dev/null
psql_in advlock_fresh -c "CREATE EXTENSION advlock" >/dev/null
# The catalog queries of pg_test/upgrade/test_upgrade.py: functions (signatures, bodies, volatility,
# parallel safety, strictness, settings, privileges, comments), relations, extension members.
catalog_functions="SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_function_arguments(p.oid),
       pg_get_function_result(p.oid), p.provolatile, p.proparallel, p.proisstrict,
       p.prosecdef, p.proretset, l.lanname, p.prosrc, p.probin, p.proconfig, p.proacl::text,
       obj_description(p.oid, 'pg_proc')
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'advlock'
 ORDER BY 1, 2"
catalog_relations="SELECT c.relname, c.relkind, pg_get_viewdef(c.oid), c.relacl::text, obj_description(c.oid, 'pg_class'),
       (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
          FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
  FROM pg_class c
  JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'advlock'
 ORDER BY 1"
catalog_members="SELECT pg_describe_object(d.classid, d.objid, d.objsubid)
  FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'advlock'
 WHERE d.deptype = 'e' ORDER BY 1"
same_catalog() {  # same_catalog NAME QUERY: the updated database and the fresh one agree (and are not empty)
  psql_in advlock_up -c "$2" >"$work/$1.updated" && psql_in advlock_fresh -c "$2" >"$work/$1.fresh" &&
    [ -s "$work/$1.fresh" ] && diff "$work/$1.fresh" "$work/$1.updated"
}
check "extension functions equal a fresh install's ($(psql_in advlock_fresh -c "$catalog_functions" | wc -l) rows)" \
  same_catalog functions "$catalog_functions"
check "extension relations equal a fresh install's" same_catalog relations "$catalog_relations"
check "extension members equal a fresh install's ($(psql_in advlock_fresh -c "$catalog_members" | wc -l) objects)" \
  same_catalog members "$catalog_members"
# The comparison sees a difference when there is one: a fresh install with one comment changed.
psql_in postgres -c "CREATE DATABASE advlock_changed" >/dev/null
psql_in advlock_changed -c "CREATE EXTENSION advlock" -c "COMMENT ON VIEW advlock_holders IS 'changed'" >/dev/null
differs() { ! psql_in advlock_changed -c "$1" | diff -q - <(psql_in advlock_fresh -c "$1") >/dev/null; }
check "the comparison tells a changed install from a fresh one" differs "$catalog_relations"
check "PostgreSQL stops" pg_stop
check "apt-get purge $pkg" apt_get purge "$pkg"
none_left() { local left; left=$(advlock_left); [ -z "$left" ] || { echo "left: $left"; return 1; }; }
check "no file named after advlock left in the tree" none_left
[ "$failed" -eq 0 ]
