#!/usr/bin/env bash
# The fast loop as documented: runs every command of the first ```sh block of CONTRIBUTING.md's
# "## Fast loop" section, as written, one after the other from the repository root, and checks
# that each exits 0 and that the kept instance was reused (ADVLOCK_TEST_KEEP). The in-database
# test command (the section's second block) is left out: it builds and installs the extension.
# ADVLOCK_TEST_PORT (default here 5419, beside the suites' 5418) is the instances' port.
# Prints "fast-loop: N passed, M failed" and writes "fast-loop N M" to $ADVLOCK_SUMMARY.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
cd "$repo" || exit 1
summary=${ADVLOCK_SUMMARY:-/dev/null}
export ADVLOCK_TEST_PORT=${ADVLOCK_TEST_PORT:-5419}
# The commands print their own summaries; keep them out of the caller's.
export ADVLOCK_SUMMARY=/dev/null

mapfile -t commands < <(awk '
  /^## / { in_section = ($0 == "## Fast loop"); next }
  in_section && /^```sh$/ && !done { in_block = 1; next }
  in_block && /^```$/ { in_block = 0; done = 1; next }
  in_block { sub(/[[:space:]]+#.*$/, ""); if ($0 != "") print }' CONTRIBUTING.md)

passed=0 failed=0
log=$(mktemp /tmp/advlock-fast-loop.XXXXXX.log)
result() { # name ok?
  if [ "$2" = 0 ]; then passed=$((passed + 1)); echo "fast-loop: ok   $1"
  else failed=$((failed + 1)); echo "fast-loop: FAIL $1"; fi
}
if [ ${#commands[@]} -lt 3 ]; then
  result "CONTRIBUTING.md's fast-loop commands found (got ${#commands[@]})" 1
fi
for cmd in "${commands[@]}"; do
  echo "fast-loop: \$ $cmd"
  bash -c "$cmd" >"$log.one" 2>&1
  rc=$?
  cat "$log.one" >>"$log"
  [ "$rc" -eq 0 ] || tail -40 "$log.one"
  result "$cmd" "$rc"
done
grep -q '^pg_test: reusing the instance left running' "$log"
result "a later ADVLOCK_TEST_KEEP=1 run reused the kept instance" $?
rm -f "$log.one"

echo "fast-loop $passed $failed" >>"$summary"
echo "fast-loop: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
