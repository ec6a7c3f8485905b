#!/usr/bin/env bash
# The Node client's checks: the package.json version equals Cargo.toml's, `tsc --strict` (the
# package and its tests), ESLint, `npm pack`, then `node --test` against real servers that
# clients/run_tests_common.sh starts (as for the Python and Ruby clients; stopped on exit): a
# database with the advlock extension, a database with the SQL edition (same instance), and a
# second instance with advlock in shared_preload_libraries (the only run where leases work: the
# lease tests skip elsewhere, saying why, and check the error there instead). The PgBouncer
# tests start real PgBouncers (transaction, statement, session mode) as the postgres OS user
# (test/helpers.ts runs pg_test/pgbouncer_launcher.py with python3). The README's examples run
# against the packed package (test/readme.test.ts), and `npm install` of the package from a
# directory (built by its `prepare` script) and from the tarball must give an importable package.
# Appends "node-client PASSED FAILED" to $ADVLOCK_SUMMARY if set (the version check, tsc, ESLint,
# npm pack and the install check count as one check each). Works as root on a fresh machine with
# Node.js >= 20 and npm (scripts/setup.sh installs them): the npm packages are installed here
# with `npm ci` into clients/node/node_modules, kept until package-lock.json changes. ADVLOCK_NODE_PORT picks the port (default: the first free one from 5570); the
# preloaded instance takes the next free one. Arguments, if any, go to node --test: options
# (e.g. --test-name-pattern=S35) and test files (e.g. build/test/poolers.test.js, in place of
# every build/test/*.test.js).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
client=node-client
# shellcheck source=SCRIPTDIR/../run_tests_common.sh
. "$repo/clients/run_tests_common.sh"

cd "$here" || exit 1
test_options=() test_files=()
for a in "$@"; do
  case $a in -*) test_options+=("$a") ;; *) test_files+=("$a") ;; esac
done
"$here/build.sh" || { failed=1; report; exit 1; }
[ ${#test_files[@]} -gt 0 ] || test_files=(build/test/*.test.js)

version_matches() {
  local cargo pkg
  cargo=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)
  pkg=$(node -p 'require("./package.json").version')
  grep -q "export const version = \"$cargo\";" src/index.ts || { echo "src/index.ts: version is not $cargo"; return 1; }
  [ "$pkg" = "$cargo" ] || { echo "package.json version $pkg, Cargo.toml $cargo"; return 1; }
}
check "version = Cargo.toml's" version_matches
check "tsc --strict (package and tests)" npx --no-install tsc -p tsconfig.test.json
check "eslint" npx --no-install eslint .

# The package as a user installs it: npm pack, unpacked into a node_modules of its own beside the
# drivers (the README's examples import "advlock", "pg" and "postgres" from there).
tgz=""
packed() {
  tgz=$(npm pack --silent --pack-destination "$work" | tail -1) || return 1
  mkdir -p "$work/readme/node_modules/advlock" &&
    tar -xzf "$work/$tgz" -C "$work/readme/node_modules/advlock" --strip-components=1 &&
    ln -s "$here/node_modules/pg" "$here/node_modules/postgres" "$work/readme/node_modules/" &&
    [ -f "$work/readme/node_modules/advlock/dist/index.js" ] && [ -f "$work/readme/node_modules/advlock/dist/index.d.ts" ] &&
    ! tar -tzf "$work/$tgz" | grep -qE '(^|/)(src|test|build|node_modules)/'
}
check "npm pack" packed
# As a user installs it, into an empty project with pg beside it: `npm install <directory> pg`
# from a copy of the package with nothing built or installed (no node_modules, dist, build: npm
# runs `prepare`, which installs the compiler from package-lock.json and builds dist/), and
# `npm install <tarball> pg` with npm pack's tarball; either way `import "advlock"` works.
installed() {
  local fresh="$work/install/advlock" pgv app from
  pgv=$(node -p 'require("./node_modules/pg/package.json").version') || return 1
  mkdir -p "$fresh" || return 1
  tar -C "$here" --exclude=./node_modules --exclude=./dist --exclude=./build -cf - . | tar -C "$fresh" -xf - || return 1
  for app in path tarball; do
    from=$fresh
    [ "$app" = tarball ] && from="$work/$tgz"
    mkdir -p "$work/install/$app" || return 1
    printf '{"name": "app-%s", "version": "1.0.0", "private": true}\n' "$app" >"$work/install/$app/package.json"
    if ! (cd "$work/install/$app" && npm install --no-audit --no-fund --prefer-offline --loglevel=error "$from" "pg@$pgv" &&
      node --input-type=module -e 'import { key, leader } from "advlock"; import pg from "pg";
        if (key("account", 42) !== 7700915891107303510n || typeof leader !== "function" || typeof pg.Pool !== "function") process.exit(1);'); then
      echo "node-client: npm install $from pg did not give an importable package"
      return 1
    fi
  done
}
check "npm install from a directory and from the tarball" installed
export ADVLOCK_NODE_README_DIR="$work/readme"

start_servers advlock_node 5570 "${ADVLOCK_NODE_PORT:-}"

# run_node NAME DATABASE PORT DIR: node --test against DATABASE of the instance in DIR, counted
# from its closing lines. The tests may restart that instance (S45: pg_ctl restart -m fast, as
# the postgres OS user), so they are told its pg_ctl and data directory.
run_node() {
  echo "node-client: node --test against $1 (database $2)"
  ADVLOCK_NODE_DSN="postgresql://postgres@127.0.0.1:$3/$2" ADVLOCK_NODE_PG_CTL="$PGBIN/pg_ctl" ADVLOCK_NODE_PGDATA="$4/data" \
    node --test --test-concurrency=1 --test-reporter=spec --test-reporter-destination=stdout \
      --test-reporter=tap --test-reporter-destination="$work/$1.tap" "${test_options[@]}" \
      "${test_files[@]}"
  local rc=$? p f s
  p=$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$work/$1.tap" | tail -1)
  f=$(sed -n 's/^# fail \([0-9]*\)$/\1/p' "$work/$1.tap" | tail -1)
  s=$(sed -n 's/^# cancelled \([0-9]*\)$/\1/p' "$work/$1.tap" | tail -1)
  p=${p:-0} f=$((${f:-0} + ${s:-0}))
  [ "$rc" -eq 0 ] || [ "$f" -gt 0 ] || f=1   # node --test failed without a test failing
  echo "node-client: $1: $p passed, $f failed"
  passed=$((passed + p)) failed=$((failed + f))
}
run_node extension advlock_node "$port" "$work/pg"
run_node edition advlock_node_edition "$port" "$work/pg"
[ "$preloaded" -eq 0 ] || run_node preloaded advlock_node "$port_pre" "$work/pre"
report
[ "$failed" -eq 0 ]
