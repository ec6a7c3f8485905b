#!/usr/bin/env bash
# advlock's setup-and-run command: installs everything (scripts/setup.sh), builds and installs
# the extension into PostgreSQL NN (release build), and starts a local PostgreSQL NN cluster
# as the `postgres` user with a database `advlock` where CREATE EXTENSION advlock has run.
#   major     NN = ADVLOCK_PG_MAJOR, default ADVLOCK_DEFAULT_MAJOR (scripts/majors.sh: 17)
#   data dir  /var/lib/postgresql/advlock-NN   (override: ADVLOCK_PGDATA)
#   port      54NN on 127.0.0.1 (5417 for 17)   (override: ADVLOCK_PORT)
# Idempotent: a second run rebuilds only what changed and restarts the cluster after the install.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export PATH="$HOME/.cargo/bin:$PATH"
. "$here/majors.sh"
major=${ADVLOCK_PG_MAJOR:-$ADVLOCK_DEFAULT_MAJOR}
PGDATA=${ADVLOCK_PGDATA:-/var/lib/postgresql/advlock-$major}
PORT=${ADVLOCK_PORT:-$((5400 + major))}
. "$here/helpers.sh"

"$here/setup.sh"
PG_CONFIG=$(pg_config_for "$major")
PGBIN=$("$PG_CONFIG" --bindir)
# scripts/install_ext.sh renames the new files over the old ones: a running cluster keeps the
# library it has mapped, and is restarted after the install to load the new one.
echo "[up] building and installing advlock (release)"
"$here/install_ext.sh" --release "$PG_CONFIG" >/tmp/advlock-install.log 2>&1 ||
  { tail -30 /tmp/advlock-install.log; exit 1; }
if [ -f "$PGDATA/postmaster.pid" ]; then
  echo "[up] restarting PostgreSQL $major to load the new advlock.so"
  as_postgres "$PGBIN/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null
fi

if [ ! -f "$PGDATA/PG_VERSION" ]; then
  echo "[up] initdb $PGDATA"
  mkdir -p "$(dirname "$PGDATA")"
  as_postgres "$PGBIN/initdb" -D "$PGDATA" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >/dev/null
  cat <<CONF | as_postgres tee -a "$PGDATA/postgresql.conf" >/dev/null
# advlock local development cluster (trust auth: loopback only)
port = $PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '/tmp'
CONF
fi
if ! as_postgres "$PGBIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
  echo "[up] starting PostgreSQL $major"
  as_postgres "$PGBIN/pg_ctl" -D "$PGDATA" -l "$PGDATA/postgres.log" -w start >/dev/null
fi
psql_() { "$PGBIN/psql" -X -q -h 127.0.0.1 -p "$PORT" -U postgres "$@"; }
psql_ -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'advlock'" | grep -q 1 ||
  psql_ -d postgres -c "CREATE DATABASE advlock"
psql_ -d advlock -c "CREATE EXTENSION IF NOT EXISTS advlock" \
                 -c "ALTER EXTENSION advlock UPDATE" 2>&1 | grep -v 'already' || true
echo "[up] advlock_key('rollup', 'nightly') = $(psql_ -d advlock -tAc "SELECT advlock_key('rollup', 'nightly')")"
echo
echo "PostgreSQL $major with advlock is running. Connect with:"
echo "  psql -h 127.0.0.1 -p $PORT -U postgres advlock"
