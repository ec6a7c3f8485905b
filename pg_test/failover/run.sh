#!/usr/bin/env bash
# Leases, leader terms, semaphores and fences under a real Patroni cluster (issue #39): starts,
# as the postgres user on loopback, a Raft witness (patroni_raft_controller: Raft needs a third
# voter to fail over) and two Patroni 4.1 nodes (built-in Raft DCS, no etcd) running PostgreSQL
# with advlock in shared_preload_libraries, creates the extension once the leader is up, and runs
# pg_test/failover/patroni_scenarios.py against it: `patronictl switchover` there and back with a
# leader, a lease and a semaphore renewed through a multi-host DSN, then node loss (SIGKILL of the
# leader's Patroni and postmaster), the killed node's rejoin (pg_rewind) and its replay of leases.
# Everything is stopped at the end, on failure too. Writes "patroni passed failed" to
# $ADVLOCK_SUMMARY. The crash/restart/promotion tests without Patroni are `pg_test/run.sh failover`.
#
# Usage: pg_test/failover/run.sh [PYTEST NODE ID...]   (default: every scenario, in order; the
#   scenarios share one cluster and run in file order, e.g. patroni_scenarios.py::test_switchover_a_leader_keeps_its_term)
# ADVLOCK_PG_CONFIG: the PostgreSQL to run (default: the default major's, scripts/majors.sh);
#   advlock must be installed into it (scripts/install_ext.sh).
# ADVLOCK_FAILOVER_BASE_PORT: the first of the 20 ports used (default 5780: PostgreSQL base+1,
#   base+2; Raft base+3 (witness), base+4, base+5; REST API base+11, base+12).
# ADVLOCK_FAILOVER_KEEP=1: keep the work directory (logs, data) after a successful run too.
# Needs scripts/setup.sh's Patroni venv (/opt/advlock-patroni) and pg_test/.venv.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pg_test="$(dirname "$here")"
. "$here/../instance.sh"   # PG_CONFIG, PGBIN, as_postgres

patroni_venv=/opt/advlock-patroni
summary=${ADVLOCK_SUMMARY:-/dev/null}
base=${ADVLOCK_FAILOVER_BASE_PORT:-5780}
scope=advlock-failover
dbname=advlock_patroni
nodes=(node1 node2)
declare -A pg_port=([node1]=$((base + 1)) [node2]=$((base + 2)))
declare -A raft_port=([node1]=$((base + 4)) [node2]=$((base + 5)))
declare -A rest_port=([node1]=$((base + 11)) [node2]=$((base + 12)))
witness_port=$((base + 3))

# Every run is counted once: by fail_setup, by the pytest result, or (interrupted) by teardown.
fail_setup() { echo "failover: $*"; echo "patroni 0 1" >>"$summary"; counted=1; exit 1; }
[ -x "$patroni_venv/bin/patroni" ] || fail_setup "no Patroni in $patroni_venv: run scripts/setup.sh"
[ -x "$pg_test/.venv/bin/python" ] || fail_setup "no pg_test/.venv: run scripts/setup.sh"
[ -f "$("$PG_CONFIG" --pkglibdir)/advlock.so" ] || fail_setup "advlock is not installed into $PG_CONFIG (scripts/install_ext.sh)"
for port in "${pg_port[@]}" "${raft_port[@]}" "${rest_port[@]}" "$witness_port"; do
  ! (: <>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || fail_setup "port $port is in use (ADVLOCK_FAILOVER_BASE_PORT moves the range)"
done

work=$(mktemp -d /tmp/advlock-failover.XXXXXX)
chmod 755 "$work"; chown postgres "$work"
echo "failover: Patroni $("$patroni_venv/bin/patroni" --version | awk '{print $2}'), PostgreSQL $("$PG_CONFIG" --version | awk '{print $2}'), in $work"

# start NAME COMMAND...: COMMAND as postgres in the background, its pid in $work/NAME.pid (the
# shell execs it, so the pid is the daemon's own, not sudo's), its output in $work/NAME.log.
start() {
  local name=$1; shift
  # shellcheck disable=SC2016  # $$, $0 and $@ are the inner shell's
  as_postgres sh -c 'echo $$ >"$0"; exec "$@"' "$work/$name.pid" "$@" >>"$work/$name.log" 2>&1 </dev/null &
}
# shellcheck disable=SC2317  # used by teardown or through wait_for
alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }
# shellcheck disable=SC2317  # used by teardown or through wait_for
pid_of() { cat "$work/$1.pid" 2>/dev/null; }
# postmaster_of NODE: the pid in the node's postmaster.pid, while that process lives.
# shellcheck disable=SC2317  # used by teardown or through wait_for
postmaster_of() { local p; p=$(as_postgres head -1 "$work/$1/data/postmaster.pid" 2>/dev/null) && alive "$p" && echo "$p"; }
# stop_pid PID SECONDS: SIGTERM, then SIGKILL when it still runs after SECONDS.
# shellcheck disable=SC2317  # used by teardown or through wait_for
stop_pid() {
  local pid=$1 i
  alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null
  for ((i = 0; i < $2 * 10; i++)); do alive "$pid" || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null; sleep 0.2
}

# shellcheck disable=SC2317  # run by the EXIT trap
teardown() {
  local node pm pid left=()
  stop_pid "${pytest_pid:-}" 5; stop_pid "${tail_pid:-}" 1
  # Patroni stops its PostgreSQL on SIGTERM; the pg_ctl after it catches a postmaster it left.
  for node in "${nodes[@]}"; do stop_pid "$(pid_of "$node")" 30; done
  for node in "${nodes[@]}"; do
    if pm=$(postmaster_of "$node"); then as_postgres "$PGBIN/pg_ctl" -D "$work/$node/data" -m immediate -w stop >/dev/null 2>&1 || kill -KILL "$pm"; fi
  done
  stop_pid "$(pid_of witness)" 10
  # Whatever still names the work directory was started here (a backend whose postmaster was
  # killed, a pg_rewind of Patroni's): ended by its pid, and reported.
  while IFS=/ read -r _ _ pid _; do
    [ "$pid" != $$ ] && alive "$pid" && grep -qsF "$work" "/proc/$pid/cmdline" && left+=("$pid") && kill -KILL "$pid"
  done < <(grep -lsF "$work" /proc/[0-9]*/cmdline)
  [ ${#left[@]} -eq 0 ] || echo "failover: killed processes left behind: ${left[*]}"
  [ -n "${counted:-}" ] || { echo "patroni 0 1" >>"$summary"; echo "failover: interrupted"; }
  if [ "${status:-1}" -eq 0 ] && [ -z "${ADVLOCK_FAILOVER_KEEP:-}" ]; then rm -rf "$work"
  else rm -rf "$work"/node*/data "$work"/node*/raft "$work/witness-raft"; echo "failover: logs kept in $work"; fi
}
trap teardown EXIT
trap 'exit 130' INT TERM

# --- configuration ------------------------------------------------------------------------------
cat >"$work/witness.yml" <<EOF
raft:
  data_dir: $work/witness-raft
  self_addr: 127.0.0.1:$witness_port
  bind_addr: 127.0.0.1:$witness_port
  partner_addrs: ['127.0.0.1:${raft_port[node1]}', '127.0.0.1:${raft_port[node2]}']
EOF
for node in "${nodes[@]}"; do
  other=node1; [ "$node" = node1 ] && other=node2
  mkdir -p "$work/$node"
  cat >"$work/$node.yml" <<EOF
scope: $scope
name: $node
restapi:
  listen: 127.0.0.1:${rest_port[$node]}
  connect_address: 127.0.0.1:${rest_port[$node]}
raft:
  data_dir: $work/$node/raft
  self_addr: 127.0.0.1:${raft_port[$node]}
  bind_addr: 127.0.0.1:${raft_port[$node]}
  partner_addrs: ['127.0.0.1:$witness_port', '127.0.0.1:${raft_port[$other]}']
watchdog:
  mode: 'off'
bootstrap:
  dcs:
    # Patroni's minimum ttl (20 s): a lost leader is replaced about 20 s after it stopped
    # renewing; loop_wait + 2 * retry_timeout must not exceed ttl.
    ttl: 20
    loop_wait: 1
    retry_timeout: 5
    maximum_lag_on_failover: 67108864
    postgresql:
      # A node killed with WAL its replica never received rejoins after pg_rewind.
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: replica
        hot_standby: 'on'
        wal_log_hints: 'on'
        max_wal_senders: 10
        max_replication_slots: 10
        # After a promotion no lease is granted for 3 s (the failover branch's lock-delay;
        # a server that does not know the setting warns and ignores it).
        advlock.lease_lock_delay: 3000
  initdb:
  - encoding: UTF8
  - locale: C.UTF-8
postgresql:
  listen: 127.0.0.1:${pg_port[$node]}
  connect_address: 127.0.0.1:${pg_port[$node]}
  data_dir: $work/$node/data
  bin_dir: $PGBIN
  pgpass: $work/$node/pgpass
  # A replica's pg_basebackup asks for a fast checkpoint (a spread one paces its writes over
  # minutes even when there are few).
  basebackup:
    checkpoint: fast
  authentication:
    superuser: {username: postgres, password: advlock-failover}
    replication: {username: replicator, password: advlock-failover}
  pg_hba:
  - local all all trust
  - host all all 127.0.0.1/32 trust
  - host replication replicator 127.0.0.1/32 trust
  parameters:
    shared_preload_libraries: advlock
    unix_socket_directories: '$work/$node'
    max_connections: 100
    fsync: 'off'
    log_line_prefix: '%m [%p] %q%a '
    logging_collector: 'off'
EOF
done
chown -R postgres "$work"

# rest NODE PATH: the HTTP status of Patroni's REST API GET PATH on NODE (000: no answer).
# shellcheck disable=SC2317  # used by teardown or through wait_for
rest() { curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:${rest_port[$1]}$2"; }
# wait_for WHAT SECONDS COMMAND...: polls COMMAND every 0.5 s.
wait_for() {
  local what=$1 secs=$2 i; shift 2
  for ((i = 0; i < secs * 2; i++)); do "$@" && return 0; sleep 0.5; done
  echo "failover: timed out after ${secs}s waiting for $what"; return 1
}
# shellcheck disable=SC2317  # run through wait_for
is_primary() { [ "$(rest "$1" /primary)" = 200 ]; }
# shellcheck disable=SC2317  # run through wait_for
is_streaming() { curl -s -m 2 "http://127.0.0.1:${rest_port[$1]}/patroni" | grep -q '"replication_state": *"streaming"'; }
psql_node() { as_postgres "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "${pg_port[$1]}" -U postgres "${@:2}"; }
show_logs() { local f; for f in "$work"/*.log; do echo "--- $f (tail)"; tail -30 "$f"; done; }

# --- the cluster ---------------------------------------------------------------------------------
status=1
t0=$SECONDS
start witness "$patroni_venv/bin/patroni_raft_controller" "$work/witness.yml"
start node1 "$patroni_venv/bin/patroni" "$work/node1.yml"
if ! wait_for "node1 to bootstrap and lead" 90 is_primary node1; then show_logs; fail_setup "the cluster did not start"; fi
psql_node node1 -d postgres -c "CREATE DATABASE $dbname" || fail_setup "CREATE DATABASE failed"
psql_node node1 -d "$dbname" -c "CREATE EXTENSION advlock SCHEMA public" || fail_setup "CREATE EXTENSION advlock failed"
start node2 "$patroni_venv/bin/patroni" "$work/node2.yml"
if ! wait_for "node2 to stream from node1" 120 is_streaming node2; then show_logs; fail_setup "the replica did not start"; fi
echo "failover: witness, node1 (primary), node2 (streaming) up in $((SECONDS - t0)) s"

# What the scenarios need to drive the cluster (patroni_scenarios.py reads it).
"$pg_test/.venv/bin/python" - "$work/cluster.json" <<PY
import json, sys
nodes = {}
for name, pg, rest in (("node1", ${pg_port[node1]}, ${rest_port[node1]}), ("node2", ${pg_port[node2]}, ${rest_port[node2]})):
    nodes[name] = {"pg_port": pg, "rest_port": rest, "data": "$work/" + name + "/data",
                   "pid_file": "$work/" + name + ".pid", "log": "$work/" + name + ".log",
                   "start": ["sh", "-c", 'echo \$\$ >"\$0"; exec "\$@"', "$work/" + name + ".pid",
                             "$patroni_venv/bin/patroni", "$work/" + name + ".yml"]}
json.dump({"scope": "$scope", "dbname": "$dbname", "nodes": nodes, "work": "$work",
           "patronictl": ["$patroni_venv/bin/patronictl", "-c", "$work/node1.yml"],
           "ttl": 20, "lock_delay_ms": 3000}, open(sys.argv[1], "w"), indent=1)
PY

targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=(patroni_scenarios.py)
# pytest runs in the background and is waited for, so that a SIGINT or SIGTERM of this script
# interrupts the wait and the teardown (which ends pytest by its pid) runs at once.
: >"$work/pytest.log"
(cd "$here" && ADVLOCK_FAILOVER_CLUSTER="$work/cluster.json" PGBIN="$PGBIN" \
  exec "$pg_test/.venv/bin/python" -m pytest -q -p no:cacheprovider -o console_output_style=classic \
  --junitxml="$work/patroni.xml" "${targets[@]}" >"$work/pytest.log" 2>&1) &
pytest_pid=$!
tail -n +1 -f --pid="$pytest_pid" "$work/pytest.log" &
tail_pid=$!
wait "$pytest_pid"
rc=$?
wait "$tail_pid"
read -r passed failed < <("$pg_test/.venv/bin/python" - "$work/patroni.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception:
    print(0, 1); sys.exit()
suites = [root] if root.tag == "testsuite" else list(root)
total = sum(int(s.get("tests", 0)) for s in suites)
failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
skipped = sum(int(s.get("skipped", 0)) for s in suites)
print(total - failed - skipped, failed)
PY
)
[ ! -f "$work/figures.txt" ] || { echo "failover: measured:"; sed 's/^/  /' "$work/figures.txt"; }
echo "patroni $passed $failed" >>"$summary"; counted=1
echo "failover: patroni: $passed passed, $failed failed ($((SECONDS - t0)) s)"
status=$rc
[ "$status" -eq 0 ] || show_logs
exit "$status"
