#!/usr/bin/env bash
# Builds the SQL edition (edition/advlock_sql.sql, committed) from the pieces it shares with
# the extension, so the two cannot drift (the build itself: scripts/build_edition.py):
#   edition/src/keys.sql, acquisition.sql, holders_support.sql, metrics.sql, key_sets.sql,
#   tokens.sql            PL/pgSQL for what the extension does in Rust
#   edition/src/fence_table.sql  the table of fences (advlock_fences)
#   sql/holders.sql, sql/metrics.sql, sql/fence.sql   the extension's own views, helpers and
#                         fence functions, unchanged except CREATE -> CREATE OR REPLACE
#                         (re-running upgrades in place); sql/fence.sql is itself written
#                         first, from sql/templates/fence.sql (its (ns, id) forms once)
#   sql/comments.sql      the extension's descriptions, minus those of preload-only objects
#   edition/src/comments.sql  descriptions of the edition's own helpers (advlock_edition_*)
# Every piece runs as one EXECUTE with @extschema@ replaced by the schema the script is
# installed into (the first schema of search_path), as CREATE EXTENSION would.
#
# Usage: scripts/build_edition.sh           write edition/advlock_sql.sql
#        scripts/build_edition.sh --check   fail if the committed file differs from a fresh build
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$repo/edition/advlock_sql.sql"
tmp=$(mktemp /tmp/advlock-edition.XXXXXX.sql)
trap 'rm -f "$tmp"' EXIT

# First the extension's SQL files written from templates (build_edition.py's SQL_TEMPLATES), which
# the edition then includes.
from_templates=(sql/fence.sql)
for generated in "${from_templates[@]}"; do
  python3 "$repo/scripts/build_edition.py" "$repo" --sql "$generated" >"$tmp"
  if [ "${1:-}" = --check ]; then
    if ! diff -u "$repo/$generated" "$tmp"; then
      echo "build_edition: $generated is not the build of its template: run scripts/build_edition.sh" >&2
      exit 1
    fi
  else
    cp "$tmp" "$repo/$generated"; chmod 644 "$repo/$generated"
  fi
done

python3 "$repo/scripts/build_edition.py" "$repo" >"$tmp"

if [ "${1:-}" = --check ]; then
  if ! diff -u "$out" "$tmp"; then
    echo "build_edition: edition/advlock_sql.sql is not the build of its sources: run scripts/build_edition.sh" >&2
    exit 1
  fi
  echo "build_edition: edition/advlock_sql.sql is up to date"
else
  cp "$tmp" "$out"; chmod 644 "$out"
  echo "build_edition: wrote $out"
fi
