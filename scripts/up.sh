#!/usr/bin/env bash
# advlock's setup-and-run command: installs everything (scripts/setup.sh), builds and installs
# the extension into PostgreSQL NN (release build), and starts a local PostgreSQL NN cluster
# as the `postgres` user where every documented example runs:
#   shared_preload_libraries = 'advlock'   (labels, statistics, leases, election, wait events)
#   advlock.idle_session_lock_timeout = 0  (off; see "Turning on" below)
#   a database `advlock` with CREATE EXTENSION advlock SCHEMA public (as the README advises)
#   major     NN = ADVLOCK_PG_MAJOR, default ADVLOCK_DEFAULT_MAJOR (scripts/majors.sh: 17)
#   data dir  /var/lib/postgresql/advlock-NN   (override: ADVLOCK_PGDATA)
#   port      54NN on 127.0.0.1 (5417 for 17)   (override: ADVLOCK_PORT)
#   tree      the system's PostgreSQL NN        (override: ADVLOCK_PG_CONFIG, another tree's
#                                                pg_config: pg_test/up runs it on a test tree)
# The cluster's settings are in DATA/conf.d/advlock-dev.conf, which this script owns and rewrites
# on every run (postgresql.conf includes conf.d); ADVLOCK_DEV_CONF adds lines to it (newline
# separated), e.g. ADVLOCK_DEV_CONF="advlock.idle_session_lock_timeout = '5min'" ./scripts/up.sh.
# Idempotent: a second run keeps the data, rebuilds only what changed, and applies a changed
# configuration (a reload, or a restart when a setting needs one or advlock.so changed).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export PATH="$HOME/.cargo/bin:$PATH"
. "$here/majors.sh"
major=${ADVLOCK_PG_MAJOR:-$ADVLOCK_DEFAULT_MAJOR}
PGDATA=${ADVLOCK_PGDATA:-/var/lib/postgresql/advlock-$major}
PORT=${ADVLOCK_PORT:-$((5400 + major))}
. "$here/helpers.sh"

"$here/setup.sh"
PG_CONFIG=${ADVLOCK_PG_CONFIG:-$(pg_config_for "$major")}
PGBIN=$("$PG_CONFIG" --bindir)
so="$("$PG_CONFIG" --pkglibdir)/advlock.so"
lib_before=$(sha256sum "$so" 2>/dev/null | cut -d' ' -f1 || true)
# scripts/install_ext.sh renames the new files over the old ones: a running cluster keeps the
# library it has mapped, and is restarted below to load the new one.
echo "[up] building and installing advlock (release) into PostgreSQL $major"
"$here/install_ext.sh" --release "$PG_CONFIG" >/tmp/advlock-install.log 2>&1 ||
  { tail -30 /tmp/advlock-install.log; exit 1; }
lib_changed=0
[ "$(sha256sum "$so" | cut -d' ' -f1)" = "$lib_before" ] || lib_changed=1

if [ ! -f "$PGDATA/PG_VERSION" ]; then
  echo "[up] initdb $PGDATA"
  mkdir -p "$(dirname "$PGDATA")"
  as_postgres "$PGBIN/initdb" -D "$PGDATA" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >/dev/null
fi
# postgresql.conf includes conf.d (once; a cluster made by an earlier up.sh gets the line too,
# and the included file's settings come after, so they win).
if ! grep -q "^include_dir = 'conf.d'" "$PGDATA/postgresql.conf"; then
  printf '%s\n' "# advlock local development cluster: scripts/up.sh writes conf.d/advlock-dev.conf" \
    "include_dir = 'conf.d'" | as_postgres tee -a "$PGDATA/postgresql.conf" >/dev/null
fi
as_postgres mkdir -p "$PGDATA/conf.d"
conf="$PGDATA/conf.d/advlock-dev.conf"
# Written beside the file and renamed over it: the server never reads half of it.
{
  echo "# Written by scripts/up.sh on every run: edits here are lost. Add lines with ADVLOCK_DEV_CONF,"
  echo "# or override with ALTER SYSTEM (postgresql.auto.conf is read after this file)."
  echo "port = $PORT"
  echo "listen_addresses = '127.0.0.1'   # trust auth: loopback only"
  echo "unix_socket_directories = '/tmp'"
  echo "shared_preload_libraries = 'advlock'   # labels, statistics, leases, election, wait events"
  echo "advlock.idle_session_lock_timeout = 0   # off: a session idle while holding a session lock is kept"
  [ -z "${ADVLOCK_DEV_CONF:-}" ] || { echo "# ADVLOCK_DEV_CONF"; printf '%s\n' "$ADVLOCK_DEV_CONF"; }
} | as_postgres tee "$conf.tmp" >/dev/null
conf_changed=1
if cmp -s "$conf.tmp" "$conf"; then conf_changed=0; rm -f "$conf.tmp"; else as_postgres mv -f "$conf.tmp" "$conf"; fi

psql_() { "$PGBIN/psql" -X -q -h 127.0.0.1 -p "$PORT" -U postgres -v ON_ERROR_STOP=1 "$@"; }
if as_postgres "$PGBIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
  # Running: a reload applies the changed settings a reload can; the others (the preload, the
  # port) are flagged pending_restart, and a new advlock.so needs a restart to be loaded.
  why=""
  [ "$lib_changed" = 0 ] || why="to load the new advlock.so"
  if [ "$conf_changed" = 1 ]; then
    as_postgres "$PGBIN/pg_ctl" -D "$PGDATA" reload >/dev/null
    sleep 1   # the postmaster applies a reload asynchronously
    # Asked where the server listens now (postmaster.pid: port, socket directory), which a
    # changed port does not move until the restart.
    pending=$(as_postgres "$PGBIN/psql" -X -q -h "$(as_postgres sed -n 5p "$PGDATA/postmaster.pid")" \
      -p "$(as_postgres sed -n 4p "$PGDATA/postmaster.pid")" -U postgres -d postgres \
      -tAc "SELECT string_agg(name, ', ') FROM pg_settings WHERE pending_restart") || pending="the settings (could not ask)"
    if [ -n "$pending" ]; then why="${why:+$why and }to apply $pending"
    else echo "[up] reloaded: conf.d/advlock-dev.conf changed"; fi
  fi
  if [ -n "$why" ]; then
    echo "[up] restarting PostgreSQL $major $why"
    as_postgres "$PGBIN/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null
  fi
fi
if ! as_postgres "$PGBIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
  echo "[up] starting PostgreSQL $major"
  as_postgres "$PGBIN/pg_ctl" -D "$PGDATA" -l "$PGDATA/postgres.log" -w start >/dev/null ||
    { tail -20 "$PGDATA/postgres.log"; exit 1; }
fi
psql_ -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'advlock'" | grep -q 1 ||
  psql_ -d postgres -c "CREATE DATABASE advlock"
# SCHEMA public: never the first schema of whatever search_path is in force (README, "CREATE
# EXTENSION ... SCHEMA"). An existing install is updated to this build's version.
psql_ -d advlock -c "CREATE EXTENSION IF NOT EXISTS advlock SCHEMA public" -c "ALTER EXTENSION advlock UPDATE" 2>&1 |
  grep -v 'already' || true

# What is enabled, as the server reports it.
read -r version schema < <(psql_ -d advlock -tA -F ' ' -c \
  "SELECT extversion, extnamespace::regnamespace FROM pg_extension WHERE extname = 'advlock'")
preload=$(psql_ -d advlock -tAc "SHOW shared_preload_libraries")
idle=$(psql_ -d advlock -tAc "SHOW advlock.idle_session_lock_timeout")
# A lease taken and released: what needs the preload, working.
leases="NOT working"
[ "$(psql_ -d advlock -tAc "SELECT advlock_lease_release(advlock_lease('up.sh', 'check', 1000, 0))" 2>/dev/null)" != t ] || leases=working
echo
echo "PostgreSQL $("$PG_CONFIG" --version | cut -d' ' -f2) with advlock $version is running (data $PGDATA):"
echo "  database advlock, extension in schema $schema"
echo "  shared_preload_libraries = '$preload': labels, statistics (advlock_stats), leases ($leases),"
echo "    leader election, wait events"
if [ "$idle" = 0 ]; then
  echo "  advlock.idle_session_lock_timeout = 0: off. Turn it on for a session, a database or the cluster:"
  echo "    SET advlock.idle_session_lock_timeout = '5min';"
  echo "    ALTER DATABASE advlock SET advlock.idle_session_lock_timeout = '5min';"
  echo "    ADVLOCK_DEV_CONF=\"advlock.idle_session_lock_timeout = '5min'\" ./scripts/up.sh"
else
  echo "  advlock.idle_session_lock_timeout = $idle (docs/idle-session-locks.md)"
fi
echo "  settings: $conf (rewritten by every run of scripts/up.sh)"
echo "  advlock_key('rollup', 'nightly') = $(psql_ -d advlock -tAc "SELECT advlock_key('rollup', 'nightly')")"
echo "Connect with:"
echo "  psql -h 127.0.0.1 -p $PORT -U postgres advlock"
echo "  export DATABASE_URL=postgresql://postgres@127.0.0.1:$PORT/advlock   # the client READMEs' examples"
echo "Stop it with:"
echo "  sudo -u postgres $PGBIN/pg_ctl -D $PGDATA stop"
