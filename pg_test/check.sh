# shellcheck shell=bash
# Counted assertions for the shell-driven suites (package, bookworm, pg_upgrade). Sourced.
#   check DESCRIPTION COMMAND...   runs COMMAND; prints "$check_name: ok|FAIL DESCRIPTION" and
#                                  counts it in $passed / $failed
check_name=${check_name:-check} passed=0 failed=0
check() {
  local what=$1; shift
  if "$@"; then passed=$((passed + 1)); echo "$check_name: ok   $what"
  else failed=$((failed + 1)); echo "$check_name: FAIL $what"; fi
}
