#!/usr/bin/env bash
# Installs the Node client's npm packages (npm ci from package-lock.json, into
# clients/node/node_modules, redone only when package-lock.json changes) and compiles the package
# (dist/) and its tests (build/); with --package, the package alone. Used by run_tests.sh and
# bench case 12 (--package).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
command -v npm >/dev/null || { echo "node-client: npm is missing (scripts/setup.sh installs Node.js and npm)" >&2; exit 1; }
stamp=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ "$(cat node_modules/.advlock-stamp 2>/dev/null)" != "$stamp" ]; then
  echo "node-client: npm ci"
  npm ci --no-audit --no-fund --loglevel=error --ignore-scripts   # the build is below (prepare.mjs is for installs from a directory)
  echo "$stamp" >node_modules/.advlock-stamp
fi
rm -rf dist
npx --no-install tsc -p tsconfig.json
[ "${1:-}" = --package ] && exit 0
rm -rf build
npx --no-install tsc -p tsconfig.test.json
