#!/usr/bin/env bash
# The Ruby client's checks: `gem build` (the gem, installed into a directory of its own for the
# README's examples), then minitest against a real PostgreSQL with the advlock extension, against
# the SQL edition (one instance), and against a second instance with advlock in
# shared_preload_libraries (the same suite preloaded, and the only run where leases work: the
# lease tests skip elsewhere, saying why, and check the error there instead);
# clients/run_tests_common.sh starts both instances (stopped on exit) and counts, as for the
# Python and Node clients. Real PgBouncers (transaction, statement, session) are started by the
# tests (test/bouncer.rb runs pg_test/pgbouncer_launcher.py with python3).
# RuboCop runs in scripts/lint.sh. Appends "ruby-client PASSED FAILED" to $ADVLOCK_SUMMARY if set
# (the gem build counts as one check). Needs Debian's ruby, ruby-pg, ruby-activerecord and
# ruby-minitest (scripts/setup.sh installs them). ADVLOCK_RB_PORT picks the port (default: the
# first free one from 5433); the preloaded instance takes the next free one. Arguments, if any,
# are passed to minitest (e.g. -n /s17/).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
client=ruby-client
# shellcheck source=SCRIPTDIR/../run_tests_common.sh
. "$repo/clients/run_tests_common.sh"
if ! ruby -e 'require "pg"; require "active_record"; require "minitest"' 2>/dev/null; then
  echo "ruby-client: ruby with pg, activerecord and minitest is missing (scripts/setup.sh installs them)"
  failed=1; report; exit 1
fi

# The gem as `gem build` makes it, installed into a directory of its own: the README's examples
# run against it (pg, a dependency, is Debian's ruby-pg: found on the system gem path).
cd "$here" || exit 1
version=$(ruby -e 'require_relative "lib/advlock/version"; print Advlock::VERSION')
if gem build advlock.gemspec --output "$work/advlock-$version.gem" >"$work/gem-build.log" 2>&1 &&
   gem install --local "$work/advlock-$version.gem" --install-dir "$work/gems" --no-document \
     --ignore-dependencies >>"$work/gem-build.log" 2>&1; then
  passed=$((passed + 1))
  echo "ruby-client: gem build: advlock-$version.gem"
  export ADVLOCK_RB_GEM_HOME="$work/gems" ADVLOCK_RB_SYSTEM_GEM_PATH
  ADVLOCK_RB_SYSTEM_GEM_PATH=$(gem env paths)
else
  cat "$work/gem-build.log"; echo "ruby-client: gem build failed"; failed=$((failed + 1))
fi

start_servers advlock_ruby 5433 "${ADVLOCK_RB_PORT:-}"

# run_minitest NAME DATABASE [PORT]: every test/*_test.rb against DATABASE, counted from
# minitest's closing line ("N runs, A assertions, F failures, E errors, S skips").
run_minitest() {
  echo "ruby-client: minitest against $1 (database $2)"
  ADVLOCK_RB_DSN="postgresql://postgres@127.0.0.1:${3:-$port}/$2" \
    timeout 1200 ruby -Ilib -Itest -e 'Dir["test/*_test.rb"].sort.each { |f| require_relative f }' -- "${@:4}" \
    2>&1 | tee "$work/$1.log"
  local rc=${PIPESTATUS[0]} line p f
  line=$(grep -E '^[0-9]+ runs, [0-9]+ assertions, [0-9]+ failures, [0-9]+ errors, [0-9]+ skips' "$work/$1.log" | tail -1)
  if [ -z "$line" ]; then
    p=0 f=1
  else
    read -r runs _ _ _ fails _ errors _ skips _ <<<"$line"
    p=$((runs - fails - errors - skips)) f=$((fails + errors))
  fi
  [ "$rc" -eq 0 ] || [ "$f" -gt 0 ] || f=1   # minitest failed without a test failing
  echo "ruby-client: $1: $p passed, $f failed"
  passed=$((passed + p)) failed=$((failed + f))
}
run_minitest extension advlock_ruby "$port" "$@"
run_minitest edition advlock_ruby_edition "$port" "$@"
# The preloaded run may restart its instance (S45: pg_ctl restart -m fast, as the postgres user).
[ "$preloaded" -eq 0 ] ||
  ADVLOCK_RB_PRE_DIR="$work/pre" ADVLOCK_RB_PGBIN="$PGBIN" run_minitest preloaded advlock_ruby "$port_pre" "$@"
report
[ "$failed" -eq 0 ]
