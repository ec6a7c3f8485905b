#!/usr/bin/env bash
# edition-signatures: the SQL edition defines exactly the extension's functions and views --
# same names, argument lists with names and defaults, results, volatility, parallel safety,
# strictness, SECURITY DEFINER (never), view columns -- compared in two databases of one
# instance, one with CREATE EXTENSION advlock, one with the edition. The edition's own helpers
# (advlock_edition_*) are left out; the extension's objects the edition lacks on purpose are
# listed in extension_only.txt. Usage (from run.sh): signatures.sh WORKDIR PORT
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../instance.sh"
work=$1 port=$2

describe() { # database -> one line per function, procedure and view of schema public named advlock_*
  psql_db -d "$1" -At <<'SQL'
SELECT CASE p.prokind WHEN 'p' THEN 'procedure ' ELSE 'function ' END
       || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')'
       || ' | args: ' || pg_get_function_arguments(p.oid)
       || ' | returns: ' || coalesce(pg_get_function_result(p.oid), '(procedure)')
       || ' | ' || CASE p.provolatile WHEN 'i' THEN 'immutable' WHEN 's' THEN 'stable' ELSE 'volatile' END
       || ' | parallel ' || CASE p.proparallel WHEN 's' THEN 'safe' WHEN 'r' THEN 'restricted' ELSE 'unsafe' END
       || ' | strict ' || p.proisstrict || ' | security definer ' || p.prosecdef
  FROM pg_proc p
 WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'advlock\_%'
   AND p.proname NOT LIKE 'advlock\_edition\_%'
UNION ALL
SELECT 'view ' || c.relname || ' | columns: '
       || string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
 WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'v' AND c.relname LIKE 'advlock\_%'
 GROUP BY c.relname
ORDER BY 1;
SQL
}

psql_db -d postgres -c "CREATE DATABASE edition_sig_ext" -c "CREATE DATABASE edition_sig_sql" || exit 1
psql_db -d edition_sig_ext -c "CREATE EXTENSION advlock SCHEMA public" || exit 1
PGOPTIONS='-c search_path=public' psql_db -d edition_sig_sql -f "$work/advlock_sql.sql" >/dev/null || exit 1
describe edition_sig_ext >"$work/sig-ext.txt" || exit 1
describe edition_sig_sql >"$work/sig-sql.txt" || exit 1
grep -v '^#' "$here/extension_only.txt" | sed '/^$/d' >"$work/sig-only.txt"
# The extension's objects minus the listed ones (matched on "function name(args)", "procedure name(args)" / "view name").
awk -F' [|] ' 'NR == FNR { skip[$0] = 1; next } !($1 in skip)' "$work/sig-only.txt" "$work/sig-ext.txt" >"$work/sig-ext-core.txt"
missing=$(awk -F' [|] ' 'NR == FNR { have[$1] = 1; next } !($0 in have)' "$work/sig-ext.txt" "$work/sig-only.txt")
status=0
if [ -n "$missing" ]; then
  echo "signatures: extension_only.txt lists objects the extension does not have:"; echo "$missing"; status=1
fi
if diff -u "$work/sig-ext-core.txt" "$work/sig-sql.txt"; then
  echo "signatures: $(wc -l <"$work/sig-sql.txt") functions and views identical in the extension and the edition"
else
  echo "signatures: the edition differs from the extension (- extension, + edition)"; status=1
fi
exit $status
