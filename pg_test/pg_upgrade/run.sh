#!/usr/bin/env bash
# The DBA's upgrade journey, end to end: a cluster of PostgreSQL OLD with advlock installed from
# its package and used (preloaded, settings in postgresql.conf, a table with a generated
# advlock_key() column and an index on it, a second database still at advlock 0.2.0) is upgraded
# with pg_upgrade to PostgreSQL NEW (advlock installed from NEW's package first). Checks, counted:
#   pg_upgrade --check passes, and the upgrade succeeds;
#   advlock_key is the same function on both sides: same catalog definition, and the same value
#   for every published vector and for every stored key (before vs after, row by row);
#   the key column and its index are unchanged and valid (after.sql: amcheck, index lookups);
#   every advlock function works in the upgraded database (after.sql);
#   ALTER EXTENSION advlock UPDATE is a no-op at the current version and updates the 0.2.0 database.
# The two servers run from copies of their trees made for this test (scripts/majors.sh
# copy_pg_tree: this machine's PostgreSQL is not touched), with the package's files: the .deb's
# unpacked into the copy (dpkg-deb -x: the copy keeps Debian's layout; `dpkg -i` itself is
# pg_test/package's, in a clean Debian system) where the server is Debian's, the tarball's
# install.sh into the copy otherwise.
# Before all that, the same two server builds must be able to upgrade a cluster WITHOUT advlock:
# if they cannot (e.g. PostgreSQL 17.12 stamps every column with a pg_attver option that the
# older 18.6 minor release rejects), the pair is reported as skipped with pg_upgrade's error,
# never as passed.
# Writes "pg_upgrade-OLD-NEW passed failed [skip reason]" to $ADVLOCK_SUMMARY.
# Usage: pg_test/pg_upgrade/run.sh OLD NEW      (after scripts/package.sh OLD NEW)
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$(dirname "$here")")"
. "$repo/scripts/majors.sh"
summary=${ADVLOCK_SUMMARY:-/dev/null}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)
old_major=${1:?usage: run.sh OLD NEW} new_major=${2:?usage: run.sh OLD NEW}
name="pg_upgrade-$old_major-$new_major"
work=$(mktemp -d /tmp/advlock-pg_upgrade.XXXXXX); chmod 755 "$work"; chown postgres "$work"
for side in old new; do
  m=$old_major; [ $side = new ] && m=$new_major
  copy_pg_tree "$m" "$work/tree-$side" ||
    { echo "$name 0 1 could not copy PostgreSQL $m's tree" >>"$summary"; rm -rf "$work"; exit 1; }
done
old_pgc=$(copied_pg_config "$old_major" "$work/tree-old") new_pgc=$(copied_pg_config "$new_major" "$work/tree-new")
old_bin=$("$old_pgc" --bindir) new_bin=$("$new_pgc" --bindir)
old_ext=$("$old_pgc" --sharedir)/extension
port_old=${ADVLOCK_UPGRADE_PORT:-5440} port_new=$(( ${ADVLOCK_UPGRADE_PORT:-5440} + 1 ))
skipped=""
. "$repo/scripts/helpers.sh"
check_name=$name
. "$repo/pg_test/check.sh"
finish() {
  for side in old new; do
    local bin=$old_bin; [ $side = new ] && bin=$new_bin
    [ -f "$work/$side/postmaster.pid" ] && as_postgres "$bin/pg_ctl" -D "$work/$side" -m immediate -w stop >/dev/null 2>&1
  done
  rm -rf "$work/tree-old" "$work/tree-new"
  if [ -n "$skipped" ]; then
    echo "$name 0 0 skipped: $skipped" >>"$summary"
    echo "$name: SKIPPED: $skipped"
  else
    echo "$name $passed $failed" >>"$summary"
    echo "$name: $passed checks passed, $failed failed (work dir $work)"
  fi
}
trap finish EXIT
fail_now() { failed=$((failed + 1)); echo "$name: FAIL $*"; [ -f "$work/upgrade.log" ] && tail -40 "$work/upgrade.log"; exit 1; }

# install_advlock MAJOR SIDE: the package a DBA would use, into that side's copy of the tree.
install_advlock() {
  if major_from_debian "$1"; then
    dpkg-deb -x "$repo/target/packages/postgresql-$1-advlock_${version}-1_amd64.deb" "$work/tree-$2"
  else
    tar -C "$work" -xzf "$repo/target/packages/advlock-$version-pg$1-linux-x86_64.tar.gz" &&
      PG_CONFIG=$(copied_pg_config "$1" "$work/tree-$2") "$work/advlock-$version-pg$1-linux-x86_64/install.sh" >/dev/null
  fi
}
settings="shared_preload_libraries = 'advlock'
advlock.idle_threshold = '45s'
advlock.max_labels = 5000"
init_cluster() { # bin dir port [initdb args]
  local bin=$1 dir=$2 port=$3; shift 3
  local checksums=()
  # PostgreSQL 18's initdb enables data checksums by default, earlier ones do not, and pg_upgrade
  # needs both sides to match: every cluster here is made without (as a DBA upgrading such a
  # cluster must do for the new one).
  # (grep without -q reads all of the help: -q would stop early, initdb would die of SIGPIPE and,
  # under pipefail, the test would fail now and then -- seen once on 16 -> 18.)
  if "$bin/initdb" --help | grep -- --no-data-checksums >/dev/null; then checksums=(--no-data-checksums); fi
  as_postgres "$bin/initdb" -D "$dir" -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-sync "${checksums[@]}" "$@" \
    >"$dir.initdb.log" 2>&1 || { cat "$dir.initdb.log"; return 1; }
  printf '%s\n' "port = $port" "listen_addresses = ''" "unix_socket_directories = '$work'" |
    as_postgres tee -a "$dir/postgresql.conf" >/dev/null
}
add_settings() { printf '%s\n' "$settings" | as_postgres tee -a "$1/postgresql.conf" >/dev/null; }
psql_old() { as_postgres "$old_bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$work" -p "$port_old" -U postgres "$@"; }
psql_new() { as_postgres "$new_bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$work" -p "$port_new" -U postgres "$@"; }
# The catalog definition of advlock_key (all forms): what must be identical on both sides.
key_definition="SELECT p.oid::regprocedure::text, p.provolatile, p.proparallel, p.proisstrict, p.prosrc, p.probin
                  FROM pg_proc p WHERE p.proname = 'advlock_key' ORDER BY 1"
# Every published vector, computed by the server (ns, id as in pg_test/vectors/advlock_key_v1.json).
vectors_sql=$(python3 - "$repo/pg_test/vectors/advlock_key_v1.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
vecs = doc["vectors"] if isinstance(doc, dict) else doc
def lit(v):
    return "NULL" if v is None else "convert_from('\\x" + v.encode("utf-8").hex() + "', 'UTF8')"
rows = []
for v in vecs:
    ns, id_ = v.get("ns"), v.get("id")
    if isinstance(id_, int):
        rows.append(f"SELECT advlock_key({lit(ns)}, {id_}::bigint)")
    elif id_ is None:
        rows.append(f"SELECT advlock_key({lit(ns)})")
    else:
        rows.append(f"SELECT advlock_key({lit(ns)}, {lit(id_)})")
print(" UNION ALL ".join(rows) + ";")
PY
) || fail_now "read the key vectors"

upgrade() { (cd "$work" && as_postgres "$new_bin/pg_upgrade" -b "$old_bin" -B "$new_bin" -d "$work/old" -D "$work/new" \
  -p "$port_old" -P "$port_new" -U postgres -s "$work" "$@" >>"$work/upgrade.log" 2>&1); }

# --- can these two server builds upgrade a cluster without advlock at all? -------------------------
# A table and a view, as every real database has (pg_upgrade restores only user objects).
{ init_cluster "$old_bin" "$work/old" "$port_old" && init_cluster "$new_bin" "$work/new" "$port_new"; } || fail_now "initdb (probe)"
{ as_postgres "$old_bin/pg_ctl" -D "$work/old" -l "$work/old.log" -w start >/dev/null &&
  psql_old -d postgres -c "CREATE TABLE probe (id int PRIMARY KEY, note text)" -c "CREATE VIEW probe_v AS SELECT * FROM probe" >/dev/null &&
  as_postgres "$old_bin/pg_ctl" -D "$work/old" -m fast -w stop >/dev/null; } || fail_now "probe cluster"
if ! upgrade; then
  skipped="pg_upgrade from PostgreSQL $("$old_pgc" --version | cut -d' ' -f2) to $("$new_pgc" --version | cut -d' ' -f2) fails without advlock: $(grep -h 'ERROR:' "$work"/new/pg_upgrade_output.d/*/log/*.log 2>/dev/null | head -1 | sed 's/.*ERROR: *//')"
  exit 0
fi
rm -rf "$work/old" "$work/new" "$work/upgrade.log"

install_advlock "$old_major" old || fail_now "install advlock $version into PostgreSQL $old_major from its package"
install_advlock "$new_major" new || fail_now "install advlock $version into PostgreSQL $new_major from its package"
# The released 0.2.0 install script, so one database can start at the version users have today.
install -m 644 "$repo/sql/archive/advlock--0.2.0.sql" "$old_ext/"

# --- the PostgreSQL OLD cluster, as a DBA has it -----------------------------------------------------
{ init_cluster "$old_bin" "$work/old" "$port_old" && add_settings "$work/old"; } || fail_now "initdb $old_major"
as_postgres "$old_bin/pg_ctl" -D "$work/old" -l "$work/old.log" -w start >/dev/null || fail_now "start $old_major"
psql_old -d postgres -c "CREATE DATABASE app" -c "CREATE DATABASE legacy" >/dev/null || fail_now "create databases"
cp "$here/before.sql" "$here/after.sql" "$work/"; chown postgres "$work"/*.sql
psql_old -d app -f "$work/before.sql" >"$work/before.out" 2>&1 || { cat "$work/before.out"; fail_now "before.sql"; }
psql_old -d legacy -c "CREATE EXTENSION advlock VERSION '0.2.0'" \
  -c "CREATE TABLE t (k bigint GENERATED ALWAYS AS (advlock_key('legacy', id)) STORED, id text)" \
  -c "INSERT INTO t (id) SELECT g::text FROM generate_series(1, 100) g" >/dev/null || fail_now "0.2.0 database"
psql_old -d app -tA -c "$key_definition" >"$work/definition.old"
psql_old -d app -tA -c "$vectors_sql" >"$work/vectors.old"
psql_old -d app -tA -c "SELECT id, lock_key FROM jobs ORDER BY id" >"$work/keys.old"
psql_old -d legacy -tA -c "SELECT id, k FROM t ORDER BY id" >"$work/legacy.old"
check "advlock $version installed in $old_major (app), 0.2.0 in legacy" bash -c \
  "[ \"\$(sudo -u postgres '$old_bin/psql' -X -h '$work' -p $port_old -U postgres -d app -tAc 'SELECT extversion FROM pg_extension WHERE extname = \$\$advlock\$\$')\" = '$version' ]"
as_postgres "$old_bin/pg_ctl" -D "$work/old" -m fast -w stop >/dev/null || fail_now "stop $old_major"

# --- pg_upgrade to PostgreSQL NEW --------------------------------------------------------------------
{ init_cluster "$new_bin" "$work/new" "$port_new" && add_settings "$work/new"; } || fail_now "initdb $new_major"
upgrade --check || { tail -30 "$work/upgrade.log"; fail_now "pg_upgrade --check"; }
passed=$((passed + 1)); echo "$name: ok   pg_upgrade --check"
upgrade || { tail -30 "$work/upgrade.log"; fail_now "pg_upgrade"; }
passed=$((passed + 1)); echo "$name: ok   pg_upgrade"
as_postgres "$new_bin/pg_ctl" -D "$work/new" -l "$work/new.log" -w start >/dev/null || fail_now "start $new_major"

psql_new -d app -tA -c "$key_definition" >"$work/definition.new"
psql_new -d app -tA -c "$vectors_sql" >"$work/vectors.new"
psql_new -d app -tA -c "SELECT id, lock_key FROM jobs ORDER BY id" >"$work/keys.new"
psql_new -d legacy -tA -c "SELECT id, k FROM t ORDER BY id" >"$work/legacy.new"
check "advlock_key has the same catalog definition on $old_major and $new_major" diff "$work/definition.old" "$work/definition.new"
check "advlock_key gives the same value for all $(wc -l <"$work/vectors.old") vectors on $old_major and $new_major" \
  bash -c "[ -s '$work/vectors.old' ] && diff '$work/vectors.old' '$work/vectors.new'"
check "the 20000 stored keys are unchanged" bash -c "[ \$(wc -l <'$work/keys.new') = 20000 ] && diff -q '$work/keys.old' '$work/keys.new'"
check "the 0.2.0 database's stored keys are unchanged" diff -q "$work/legacy.old" "$work/legacy.new"
check "after.sql: keys, index (amcheck), every function, on $new_major" \
  bash -c "sudo -u postgres '$new_bin/psql' -X -q -v ON_ERROR_STOP=1 -v new_major=$new_major -h '$work' -p $port_new -U postgres -d app -f '$work/after.sql' >'$work/after.out' 2>&1 || { cat '$work/after.out'; false; }"
check "ALTER EXTENSION advlock UPDATE at $version is a no-op" bash -c \
  "sudo -u postgres '$new_bin/psql' -X -h '$work' -p $port_new -U postgres -d app -c 'ALTER EXTENSION advlock UPDATE' 2>&1 | grep -q 'version \"$version\" of extension \"advlock\" is already installed'"
check "ALTER EXTENSION advlock UPDATE takes the 0.2.0 database to $version on $new_major" bash -c \
  "sudo -u postgres '$new_bin/psql' -X -q -v ON_ERROR_STOP=1 -h '$work' -p $port_new -U postgres -d legacy -tA \
     -c 'ALTER EXTENSION advlock UPDATE' -c 'SELECT extversion FROM pg_extension WHERE extname = \$\$advlock\$\$' | grep -qx '$version'"
check "the updated 0.2.0 database computes the keys it stored" bash -c \
  "[ \"\$(sudo -u postgres '$new_bin/psql' -X -h '$work' -p $port_new -U postgres -d legacy -tAc \
     'SELECT count(*) FROM t WHERE k <> advlock_key(\$\$legacy\$\$, id)')\" = 0 ]"
[ $failed -eq 0 ]
