#!/usr/bin/env bash
# Installs everything advlock needs on a fresh Debian bookworm machine (run as root):
# every supported PostgreSQL major with its server headers and test drivers (scripts/majors.sh
# says where each comes from: 15 from bookworm, 17 from Debian trixie pinned low so nothing
# else is pulled from it unasked, 16 and 18 from pinned PyPI wheels), sudo, PgBouncer,
# promtool and postgres_exporter (bookworm's prometheus packages, for the monitoring suite), the
# packaging tools (lintian, a bookworm glibc sysroot to link against), the release tools (apt-utils, gnupg, debootstrap),
# cargo-pgrx 0.18.1, `cargo pgrx init` for every major, the test command's private copies of
# every major's tree (scripts/majors.sh, test_tree_ensure) with a PGRX_HOME of their own, a
# Python virtual environment for the real-driver suites, Patroni 4.1 in a venv of its own
# (pg_test/failover), and Ruby with ruby-pg, ActiveRecord,
# minitest and RuboCop (the Ruby client, clients/ruby).
# ADVLOCK_PG_MAJORS="15 17" (space separated) limits the majors; the default major
# (ADVLOCK_DEFAULT_MAJOR in scripts/majors.sh) is always set up.
# Idempotent: every step checks before it acts, so a second run takes seconds.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
PGRX_VERSION=0.18.1
. "$here/majors.sh"
read -r -a majors <<<"${ADVLOCK_PG_MAJORS:-${ADVLOCK_MAJORS[*]}}"
[[ " ${majors[*]} " == *" $ADVLOCK_DEFAULT_MAJOR "* ]] || majors+=("$ADVLOCK_DEFAULT_MAJOR")

log() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

need_pg=()
# PostgreSQL 17 comes from trixie (need_pg), 15 from bookworm (need_apt), 16 and 18 from wheels (below).
if [[ " ${majors[*]} " == *" 17 "* ]] && ! major_installed 17; then need_pg+=(postgresql-17 postgresql-server-dev-17); fi
need_apt=()
if [[ " ${majors[*]} " == *" 15 "* ]] && ! major_installed 15; then need_apt+=(postgresql-15 postgresql-server-dev-15); fi
command -v unzip >/dev/null || need_apt+=(unzip)
# scripts/package.sh: dpkg-shlibdeps (dpkg-dev), fakeroot, objdump and strip (binutils).
command -v dpkg-shlibdeps >/dev/null || need_apt+=(dpkg-dev)
command -v fakeroot >/dev/null || need_apt+=(fakeroot)
command -v objdump >/dev/null || need_apt+=(binutils)
command -v debootstrap >/dev/null || need_apt+=(debootstrap)   # the stock-bookworm package test
# scripts/release.sh: apt-ftparchive (apt-utils) writes the apt indexes, gpg signs them.
command -v apt-ftparchive >/dev/null || need_apt+=(apt-utils)
command -v gpg >/dev/null || need_apt+=(gnupg)
command -v gpgv >/dev/null || need_apt+=(gpgv)
[ -f /usr/share/java/postgresql.jar ] || need_apt+=(libpostgresql-jdbc-java)   # the README's JDBC snippet
# lintian is perl; PostgreSQL 17's packages brought trixie's perl, so lintian comes from trixie
# too, keeping bookworm's apt (apt would otherwise be upgraded along with libapt-pkg-perl).
command -v lintian >/dev/null || need_pg+=(lintian apt/bookworm apt-transport-https/bookworm)
command -v sudo >/dev/null || need_apt+=(sudo)
command -v pgbouncer >/dev/null || need_apt+=(pgbouncer)
# clients/node (run_tests.sh, bench case 12): Node.js >= 20 and npm; bookworm's nodejs is 18, so
# from trixie (20) when missing or older (run_tests.sh installs the npm packages itself).
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
{ [ "$node_major" -ge 20 ] && command -v npm >/dev/null; } || need_pg+=(nodejs npm)
command -v clang >/dev/null || need_apt+=(clang libclang-dev)   # bindgen, used by pgrx-pg-sys
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
command -v shellcheck >/dev/null || need_apt+=(shellcheck)   # scripts/lint.sh
# clients/ruby: Ruby with the pg gem, ActiveRecord and minitest for its tests, RuboCop for scripts/lint.sh.
for pkg in ruby ruby-pg ruby-activerecord ruby-minitest rubocop; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need_apt+=("$pkg")
done
# pg_test/monitoring: promtool (prometheus) checks the alert rules, a real postgres_exporter
# (0.11.1 in bookworm) scrapes the test cluster with monitoring/postgres_exporter/queries.yaml,
# and a real Prometheus server (the same package) runs the Grafana dashboard's queries.
{ command -v promtool >/dev/null && [ -x /usr/bin/prometheus ]; } || need_apt+=(prometheus)
[ -x /usr/bin/prometheus-postgres-exporter ] || need_apt+=(prometheus-postgres-exporter)

if [ $((${#need_apt[@]} + ${#need_pg[@]})) -gt 0 ]; then
  log "installing Debian packages: ${need_pg[*]} ${need_apt[*]}"
  if [ ! -f /etc/apt/sources.list.d/advlock-trixie.sources ]; then
    # PostgreSQL 17 is in trixie, not bookworm. Priority 100 means apt only takes from
    # trixie what bookworm cannot provide (postgresql-17 and what it strictly needs).
    mirror=$(debian_mirror)
    as_root tee /etc/apt/sources.list.d/advlock-trixie.sources >/dev/null <<SRC
Types: deb
URIs: $mirror
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    as_root tee /etc/apt/preferences.d/advlock-trixie >/dev/null <<'PIN'
Package: *
Pin: release n=trixie
Pin-Priority: 100
PIN
  fi
  # No default cluster: advlock runs its own clusters under documented data dirs.
  if [ -f /etc/postgresql-common/createcluster.conf ] &&
     ! grep -q '^create_main_cluster = false' /etc/postgresql-common/createcluster.conf; then
    echo 'create_main_cluster = false' | as_root tee -a /etc/postgresql-common/createcluster.conf >/dev/null
  fi
  as_root apt-get update -qq
  apt_install() { as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"; }
  # `-t trixie` only for PostgreSQL 17 itself (it needs trixie's libc6/libpq5/libssl) and lintian.
  [ ${#need_pg[@]} -eq 0 ] || apt_install -t trixie "${need_pg[@]}"
  [ ${#need_apt[@]} -eq 0 ] || apt_install "${need_apt[@]}"
  # Debian's pgbouncer package starts a system service; advlock's tests start their own.
  as_root service pgbouncer stop >/dev/null 2>&1 || true
  # So do prometheus (:9090) and prometheus-postgres-exporter (:9187); the monitoring suite
  # starts its own exporters and Prometheus on free loopback ports.
  for svc in prometheus prometheus-postgres-exporter; do
    as_root service "$svc" stop >/dev/null 2>&1 || true
  done
fi

for major in 16 18; do
  if [[ " ${majors[*]} " == *" $major "* ]] && ! major_installed $major; then
    log "installing PostgreSQL $major from the $(major_source $major) into $ADVLOCK_PG_ROOT/$major"
    install_wheel_major $major
  fi
done

if ! sysroot_installed; then
  log "unpacking Debian bookworm's glibc into $ADVLOCK_SYSROOT (the packages link against it)"
  install_sysroot
fi

export PATH="$HOME/.cargo/bin:$PATH"
if ! cargo pgrx --version 2>/dev/null | grep -q " $PGRX_VERSION"; then
  log "installing cargo-pgrx $PGRX_VERSION (takes a few minutes)"
  cargo install cargo-pgrx --version "$PGRX_VERSION" --locked
fi

init_args=() missing=0
for major in "${majors[@]}"; do
  pgc=$(pg_config_for "$major")
  init_args+=("--pg$major" "$pgc")
  grep -qs "pg$major = \"$pgc\"" "$HOME/.pgrx/config.toml" || missing=1
done
if [ $missing = 1 ]; then
  log "cargo pgrx init ${init_args[*]}"
  cargo pgrx init "${init_args[@]}"
fi

# The test command's private PostgreSQL trees (scripts/majors.sh: test_tree_ensure), copied once
# and again when the system package or wheel changes, and its own PGRX_HOME naming them, so that
# its suites and `cargo pgrx test` install nothing into the system PostgreSQL.
test_init_args=() missing=0
for major in "${majors[@]}"; do
  if [ "$(cat "$ADVLOCK_TEST_PG_ROOT/$major/.advlock-test-tree" 2>/dev/null)" != "$(test_tree_source "$major")" ]; then
    log "copying PostgreSQL $major into $ADVLOCK_TEST_PG_ROOT/$major (the test command's private tree)"
    test_tree_ensure "$major"
  fi
  pgc=$(test_pg_config_for "$major")
  test_init_args+=("--pg$major" "$pgc")
  grep -qs "pg$major = \"$pgc\"" "$ADVLOCK_TEST_PGRX_HOME/config.toml" || missing=1
done
if [ $missing = 1 ]; then
  log "PGRX_HOME=$ADVLOCK_TEST_PGRX_HOME cargo pgrx init ${test_init_args[*]}"
  mkdir -p "$ADVLOCK_TEST_PGRX_HOME"
  PGRX_HOME=$ADVLOCK_TEST_PGRX_HOME cargo pgrx init "${test_init_args[@]}"
fi

# The real-driver suites (pg_test/clients) run in their own virtual environment, which also
# holds the test command's Python tools (pg_test/requirements-tools.txt).
# Rebuilt whenever a requirements file changes (their hash is stamped into the venv).
venv="$repo/pg_test/.venv"
reqs=("$repo/pg_test/clients/requirements.txt" "$repo/pg_test/requirements-tools.txt")
stamp=$(cat "${reqs[@]}" | sha256sum | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" != "$stamp" ]; then
  log "creating Python venv from pg_test/clients/requirements.txt and pg_test/requirements-tools.txt"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "${reqs[0]}" -r "${reqs[1]}"
  echo "$stamp" >"$venv/.requirements.sha256"
fi
# Patroni for pg_test/failover/run.sh (patroni_scenarios.py), in a venv of the system python3
# outside /root so that the postgres user can run it (Patroni starts PostgreSQL as itself).
# Rebuilt when its requirements change.
patroni_venv=/opt/advlock-patroni
patroni_reqs="$repo/pg_test/failover/requirements-patroni.txt"
patroni_stamp=$(sha256sum "$patroni_reqs" | cut -d' ' -f1)
if [ ! -x "$patroni_venv/bin/patroni" ] || [ "$(cat "$patroni_venv/.requirements.sha256" 2>/dev/null)" != "$patroni_stamp" ]; then
  log "creating the Patroni venv $patroni_venv from pg_test/failover/requirements-patroni.txt"
  rm -rf "$patroni_venv"
  /usr/bin/python3 -m venv "$patroni_venv"
  "$patroni_venv/bin/pip" install -q --disable-pip-version-check -r "$patroni_reqs"
  echo "$patroni_stamp" >"$patroni_venv/.requirements.sha256"
  chmod -R a+rX "$patroni_venv"
fi
for major in "${majors[@]}"; do
  log "ready: PostgreSQL $("$(pg_config_for "$major")" --version | awk '{print $2}') ($(major_source "$major"))"
done
# node-postgres for the README's Node.js snippet (pg_test/clients/test_readme_snippets.py).
js="$repo/pg_test/clients/js"
if command -v npm >/dev/null && [ ! -d "$js/node_modules/pg" ]; then
  log "npm install (pg_test/clients/js: node-postgres for the README snippet test)"
  (cd "$js" && npm ci --no-audit --no-fund --loglevel=error)
fi
log "ready: $(cargo pgrx --version)"
