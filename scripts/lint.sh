#!/usr/bin/env bash
# advlock's lints, the first step of the test command (scripts/test.sh) and quick to run alone:
#   (rustfmt)    cargo fmt --check
#   (clippy)     cargo clippy --features pgNN --no-default-features --all-targets -- -D warnings
#                (NN: ADVLOCK_PG_MAJOR, default ADVLOCK_DEFAULT_MAJOR; pgrx needs `cargo pgrx init`)
#   (shellcheck) every shell script in the repository (git ls-files; configuration: .shellcheckrc)
#   (ruff)       ruff check on the Python test, bench, docs and monitoring code (configuration: ruff.toml)
#   (ascii)      scripts/lint_ascii.py: no non-ASCII character in a Rust string or char literal
#                under src/, in the SQL scripts sql/*.sql, the SQL edition or advlock.control
#                (PostgreSQL reads scripts and messages in the database's encoding)
#   (versions)   scripts/versions.py: the extension, the SQL edition and every client carry one version
#   (actionlint) the GitHub Actions workflows (.github/workflows/*.yml), with ShellCheck on their
#                `run:` steps
#   (scenarios)  clients/check_scenarios.py: every client's tests name every scenario of clients/SCENARIOS.md
#   (messages)   scripts/messages.py: the extension's messages (Rust and sql/*.sql) and the SQL
#                edition's RAISEs say what the catalog sql/messages.toml says, word for word
#                (messages once: no side can drift)
#   (mutations)  scripts/messages_mutations.py: the messages lint fails on every one-word edit
#                planted in a copy (each catalogued message on each side, the key and holder
#                descriptions)
#   (rubocop)    RuboCop (Debian's rubocop) and `ruby -wc` on the Ruby client (configuration: clients/ruby/.rubocop.yml)
# The shellcheck tool is a Debian package; ruff and actionlint are pinned in
# pg_test/requirements-tools.txt, all installed by scripts/setup.sh (RuboCop too, from Debian).
# Prints "lint: N passed, M failed" and writes "lint N M" to $ADVLOCK_SUMMARY.
# Usage: scripts/lint.sh [rustfmt clippy shellcheck ruff ascii versions actionlint scenarios messages mutations rubocop]   (default: all)
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
cd "$repo" || exit 1
export PATH="$HOME/.cargo/bin:$PATH"
. "$here/majors.sh"
major=${ADVLOCK_PG_MAJOR:-$ADVLOCK_DEFAULT_MAJOR}
venv=${ADVLOCK_VENV:-$repo/pg_test/.venv}
summary=${ADVLOCK_SUMMARY:-/dev/null}
checks=("$@"); [ ${#checks[@]} -gt 0 ] || checks=(rustfmt clippy shellcheck ruff ascii versions actionlint scenarios messages mutations rubocop)

passed=0 failed=0
lint() { # name command...
  local name=$1; shift
  echo "lint: $name: $*"
  if "$@"; then passed=$((passed + 1)); echo "lint: ok   $name"
  else failed=$((failed + 1)); echo "lint: FAIL $name"; fi
}
shell_scripts() { git ls-files -z -- '*.sh' .ci/run | xargs -0 shellcheck; }
# RuboCop over the Ruby client, and Ruby's own syntax check with warnings on every file of it.
ruby_lint() {
  (cd clients/ruby && rubocop --format simple) || return 1
  local f bad=0
  while IFS= read -r -d '' f; do
    ruby -wc "$f" >/dev/null || bad=1
  done < <(git ls-files -z -co --exclude-standard -- 'clients/ruby/*.rb' 'clients/ruby/*.gemspec')
  [ "$bad" -eq 0 ]
}

for check in "${checks[@]}"; do
  case $check in
    rustfmt)    lint rustfmt cargo fmt --check ;;
    clippy)     lint clippy cargo clippy --quiet --features "pg$major" --no-default-features --all-targets -- -D warnings ;;
    shellcheck) lint shellcheck shell_scripts ;;
    ruff)       lint ruff "$venv/bin/ruff" check --no-cache bench pg_test docs scripts monitoring clients/check_scenarios.py ;;
    ascii)      lint ascii python3 "$here/lint_ascii.py" ;;
    versions)   lint versions python3 "$here/versions.py" ;;
    actionlint) lint actionlint "$venv/bin/actionlint" -shellcheck="$(command -v shellcheck)" ;;
    scenarios)  lint scenarios python3 clients/check_scenarios.py ;;
    messages)   lint messages python3 "$here/messages.py" ;;
    mutations)  lint mutations python3 "$here/messages_mutations.py" ;;
    rubocop)    lint rubocop ruby_lint ;;
    *) echo "lint: unknown check $check"; failed=$((failed + 1)) ;;
  esac
done
echo "lint $passed $failed" >>"$summary"
echo "lint: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
