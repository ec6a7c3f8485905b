#!/usr/bin/env bash
# edition-readme: the SQL edition's examples, run as written: the README's section "Managed
# PostgreSQL: the SQL edition" (the install), then every block of docs/sql-edition.md.
# Its ```sh blocks run with bash from the repository root, psql pointed at the test instance
# (database mydb, created first); the install block runs twice (re-running is the upgrade).
# Its ```sql blocks run in mydb; a statement "SELECT ...;  -- VALUE" must print VALUE (t/f as
# true/false). The move block (move_to_extension.sql) runs last, where the extension is
# installed in this major, and must leave the extension installed and the keys unchanged.
# Usage (from run.sh): readme.sh WORKDIR PORT
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$(dirname "$here")")"
. "$here/../instance.sh"
work=$1 port=$2
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "readme: ok   $1"; }
fail() { failed=$((failed + 1)); echo "readme: FAIL $1"; }

mkdir -p "$work/readme"
python3 - "$repo" "$work/readme" <<'PY'
import re, sys
repo, out = sys.argv[1], sys.argv[2]
readme = open(f"{repo}/README.md").read()
m = re.search(r"^### Managed PostgreSQL: the SQL edition\n(.*?)(?=^#{1,3} )", readme, re.S | re.M)
if not m:
    sys.exit("readme: no section '### Managed PostgreSQL: the SQL edition' in README.md")
doc = open(f"{repo}/docs/sql-edition.md").read()
n = 0
for text in (m.group(1), doc):
    for lang, body in re.findall(r"^```(sh|sql)\n(.*?)^```", text, re.S | re.M):
        open(f"{out}/{n:02d}.{lang}", "w").write(body)
        n += 1
PY
ls "$work/readme"/*.s* >/dev/null 2>&1 || { echo "readme: no blocks extracted"; echo "readme: 0 passed, 1 failed"; exit 1; }
chmod -R a+rX "$work/readme"

export PGHOST=$work PGPORT=$port PGUSER=postgres PATH="$PGBIN:$PATH"
psql -X -q -d postgres -c "CREATE DATABASE mydb" || exit 1
ext_installed=0
[ -f "$("$PG_CONFIG" --sharedir)/extension/advlock.control" ] && ext_installed=1
move_blocks=()
for f in "$work/readme"/*; do
  name="README block $(basename "$f")"
  case $f in
    *.sh)
      if grep -q move_to_extension.sql "$f"; then move_blocks+=("$f"); continue; fi
      runs=1; grep -q 'advlock_sql.sql' "$f" && runs=2   # the install, then its re-run (upgrade)
      for r in $(seq $runs); do
        if (cd "$repo" && bash -euo pipefail "$f") >"$work/readme.log" 2>&1; then ok "$name (run $r)"
        else fail "$name (run $r)"; cat "$work/readme.log"; fi
      done ;;
    *.sql)
      if ! out=$(psql -X -q -At -v ON_ERROR_STOP=1 -d mydb -f "$f" 2>"$work/readme.err"); then
        fail "$name"; cat "$work/readme.err"; continue
      fi
      ok "$name"
      # The values in the comments, in order of the SELECTs that produce one row each.
      mapfile -t want < <(grep -E '^SELECT .*;[[:space:]]*--' "$f" | sed -E 's/^[^;]*;[[:space:]]*--[[:space:]]*([^ :]+).*/\1/')
      mapfile -t got < <(printf '%s\n' "$out" | sed 's/^t$/true/; s/^f$/false/')
      for i in "${!want[@]}"; do
        if [ "${got[$i]:-}" = "${want[$i]}" ]; then ok "$name: value ${want[$i]}"
        else fail "$name: statement $((i + 1)) printed '${got[$i]:-}', the README says '${want[$i]}'"; fi
      done ;;
  esac
done
for f in "${move_blocks[@]}"; do
  name="README block $(basename "$f") (move to the extension)"
  if [ $ext_installed = 0 ]; then
    echo "readme: SKIPPED $name: the extension is not installed in PostgreSQL $ADVLOCK_PG_MAJOR here"; continue
  fi
  before=$(psql -X -At -d mydb -c "SELECT advlock.advlock_key('rollup', 'nightly')")
  if (cd "$repo" && bash -euo pipefail "$f") >"$work/readme.log" 2>&1 &&
     [ "$(psql -X -At -d mydb -c "SELECT extname FROM pg_extension WHERE extname = 'advlock'")" = advlock ] &&
     [ "$(psql -X -At -d mydb -c "SELECT advlock.advlock_key('rollup', 'nightly')")" = "$before" ]; then
    ok "$name"
  else
    fail "$name"; cat "$work/readme.log"
  fi
done
echo "readme: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
