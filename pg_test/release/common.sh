# shellcheck shell=bash
# What the apt tests share: the chroot in use, its cluster, the advlock source in it. Sourced
# after chroot.sh and check.sh, with $suite, $major, $port set.
#   in_root CMD / as_pg CMD       run inside the tree, as root / as its postgres user
#   apt_get ARGS                  apt-get inside the tree, with only the advlock source (the tree's
#                                 Debian source in sources.list is left out: no mirror traffic
#                                 during the tests; what advlock depends on is installed already)
#   use_repo DIR KEYRING          the repository DIR as the DBA adds it: a `file:` source with
#                                 signed-by= the keyring at /etc/apt/keyrings
#   drop_repo                     removes that source, its keyring, its lists
#   pg_start [CONF...] / pg_stop  a cluster in /tmp/pgdata of the tree, socket in its /tmp
#   psql_in DB ARGS               the tree's psql on that cluster
#   vectors_ok DB                 every key vector of pg_test/vectors computed by the server
#   regress NAME [isolation]      this machine's pg_regress (pg_isolation_regress) of $major
#                                 against the tree's server
# shellcheck disable=SC2154  # suite, major, port, repo, summary: set by the script that sources this
root=$(chroot_root "$suite")
pgbin=/usr/lib/postgresql/$major/bin
in_root() { chroot "$root" "$@"; }
as_pg() { chroot --userspec=postgres:postgres "$root" "$@"; }
apt_get() {
  in_root env DEBIAN_FRONTEND=noninteractive apt-get -q -y -o Dir::Etc::SourceList=/dev/null -o APT::Get::List-Cleanup=false \
    -o Dpkg::Use-Pty=0 "$@"
}

use_repo() {
  local dir=$1 keyring=$2
  rm -rf "$root/srv/advlock-apt"; mkdir -p "$root/srv"
  cp -r "$dir" "$root/srv/advlock-apt"; chmod -R a+rX "$root/srv/advlock-apt"
  install -d "$root/etc/apt/keyrings" "$root/etc/apt/sources.list.d"
  install -m 644 "$keyring" "$root/etc/apt/keyrings/advlock-archive-keyring.gpg"
  cat >"$root/etc/apt/sources.list.d/advlock.sources" <<SRC
Types: deb
URIs: file:/srv/advlock-apt
Suites: ${ADVLOCK_APT_SUITE:-stable}
Components: main
Signed-By: /etc/apt/keyrings/advlock-archive-keyring.gpg
SRC
}

drop_repo() {
  rm -rf "$root/srv/advlock-apt" "$root/etc/apt/sources.list.d/advlock.sources" "$root/etc/apt/keyrings/advlock-archive-keyring.gpg"
  rm -f "$root"/var/lib/apt/lists/_srv_advlock-apt_* "$root"/var/lib/apt/lists/partial/_srv_advlock-apt_*
}

pg_start() {
  rm -rf "$root/tmp/pgdata"; mkdir -p "$root/tmp/pgdata"; in_root chown postgres /tmp/pgdata
  as_pg "$pgbin/initdb" -D /tmp/pgdata -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-sync >/dev/null || return 1
  printf '%s\n' "port = $port" "listen_addresses = ''" "unix_socket_directories = '/tmp'" "$@" >>"$root/tmp/pgdata/postgresql.conf"
  as_pg "$pgbin/pg_ctl" -D /tmp/pgdata -l /tmp/postgres.log -w start >/dev/null
}
pg_restart() { as_pg "$pgbin/pg_ctl" -D /tmp/pgdata -l /tmp/postgres.log -m fast -w restart >/dev/null; }
pg_stop() {
  [ -f "$root/tmp/pgdata/postmaster.pid" ] || return 0
  as_pg "$pgbin/pg_ctl" -D /tmp/pgdata -m fast -w stop >/dev/null
}
pg_kill() {
  [ -f "$root/tmp/pgdata/postmaster.pid" ] && as_pg "$pgbin/pg_ctl" -D /tmp/pgdata -m immediate -w stop >/dev/null 2>&1
  rm -rf "$root/tmp/pgdata"
}
psql_in() { local db=$1; shift; as_pg "$pgbin/psql" -X -q -At -v ON_ERROR_STOP=1 -h /tmp -p "$port" -U postgres -d "$db" "$@"; }

# "matched total" for every vector: advlock_key(ns, id text) or advlock_key(ns, id bigint).
vectors_sql=$(python3 - "$repo/pg_test/vectors/advlock_key_v1.json" <<'PY'
import json, sys
def lit(s):
    return "convert_from('\\x" + s.encode("utf-8").hex() + "', 'UTF8')"
rows = []
for v in json.load(open(sys.argv[1]))["vectors"]:
    arg = f"'{v['id_int']}'::bigint" if "id_int" in v else lit(v["id"])
    rows.append(f"(advlock_key({lit(v['ns'])}, {arg}), '{v['key']}'::bigint)")
print("SELECT count(*) FILTER (WHERE got = want) || ' ' || count(*) FROM (VALUES " + ", ".join(rows) + ") v(got, want)")
PY
)
vectors_total=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["vectors"]))' "$repo/pg_test/vectors/advlock_key_v1.json")
vectors_ok() {
  local got; got=$(psql_in "$1" -c "$vectors_sql") || return 1
  [ "$got" = "$vectors_total $vectors_total" ] || { echo "vectors: $got (matched total), want $vectors_total of $vectors_total"; return 1; }
}

# regress NAME [isolation]: the regress suite (pg_test/regress), or the isolation specs
# (pg_test/isolation: a spec needing an extension the tree's server lacks is skipped, printed), by
# this machine's driver of $major (from its test tree) against the tree's server through its
# socket directory; writes "NAME passed failed" to $summary.
regress() {
  local name=$1 kind=${2:-regress} work rc rp rf hostpgc driver spec needs tests=()
  work=$(mktemp -d /tmp/advlock-apt-regress.XXXXXX)
  cp -r "$repo/pg_test/$kind" "$work/input"; chmod -R a+rwX "$work"
  hostpgc=$(test_pg_config_for "$major")
  if [ "$kind" = isolation ]; then
    driver=$(pgxs_test_dir "$major" "$hostpgc")/isolation/pg_isolation_regress
    for spec in "$repo"/pg_test/isolation/specs/*.spec; do
      needs=$(sed -n '1s/^# requires-extension: *//p' "$spec")
      if [ -n "$needs" ] && [ ! -f "$root/usr/share/postgresql/$major/extension/$needs.control" ]; then
        echo "$name: SKIPPED $(basename "$spec" .spec): needs extension $needs"; continue
      fi
      tests+=("$(basename "$spec" .spec)")
    done
  else
    driver=$(pgxs_test_dir "$major" "$hostpgc")/regress/pg_regress
    mapfile -t tests < <(find "$repo/pg_test/regress/sql" -name '*.sql' -printf '%f\n' | sed 's/\.sql$//' | sort)
  fi
  sudo -u postgres "$driver" --bindir="$("$hostpgc" --bindir)" --host="$root/tmp" --port="$port" \
    --user=postgres --inputdir="$work/input" --outputdir="$work/out" --dbname="advlock_$kind" --load-extension=advlock \
    "${tests[@]}" 2>&1 | tee "$work/regress.log"
  rc=${PIPESTATUS[0]}
  rp=$(grep -cE '^ok [0-9]+|\.\.\. ok ' "$work/regress.log"); rf=$(grep -cE '^not ok [0-9]+|\.\.\. FAILED' "$work/regress.log")
  [ "$rc" -eq 0 ] || [ "$rf" -gt 0 ] || rf=1
  [ "$rp" -gt 0 ] || rf=$((rf + 1))
  echo "$name $rp $rf" >>"$summary"
  [ "$rc" -eq 0 ] || { [ -f "$work/out/regression.diffs" ] && head -60 "$work/out/regression.diffs"; }
  rm -rf "$work"
  [ "$rc" -eq 0 ] && [ "$rp" -gt 0 ]
}

# advlock_left: every file in the tree named after advlock, outside the test's own repository
# copy, its apt source and keyring, and its cluster.
advlock_left() {
  find "$root" -mindepth 1 -xdev \( -path "$root/srv/advlock-apt" -o -path "$root/etc/apt/sources.list.d/advlock.sources" -o \
    -path "$root/etc/apt/keyrings/advlock-archive-keyring.gpg" -o -path "$root/var/lib/apt/lists" -o -path "$root/tmp" -o -path "$root/proc" -o \
    -path "$root/dev" \) -prune -o -name '*advlock*' -print
}
