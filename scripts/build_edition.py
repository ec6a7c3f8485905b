"""The SQL edition's build (edition/advlock_sql.sql), run by scripts/build_edition.sh, which
says what goes into it: writes the edition to stdout. Usage: build_edition.py REPO
(build_edition.py REPO --sql sql/fence.sql writes that file of the extension from its template.)

Key forms, written once (#35). The extension declares the forms of a function that takes a
key once, in Rust (key_forms! in src/lock_request.rs, key_set_forms! in src/key_set.rs). In
edition/src the two forms that name the key by namespace and id, (ns text, id text, ...) and
(ns text, id bigint, ...) -- or (ns text, ids text[], ...) and (ns text, ids bigint[], ...) --
are one template, which this build writes out once per form:

    -- @forms id: text, int
    CREATE OR REPLACE FUNCTION @extschema@.advlock_f(ns pg_catalog.text, id @id_type@, ...)
    ...
        k := @extschema@.advlock_key(ns, id);
        ... @extschema@.advlock_edition_describe(k, ns, @text_id@, @int_id@) ...
        -- an integer id only  -- @only int
    ...
    $fn$;
    -- @end forms

The header names the variable (id or ids) and the forms, in the order they are written out:
text (an id of type text) and int (of type bigint). In each copy
    @id_type@       is the type of an id: pg_catalog.text or pg_catalog.int8
                    (an array of ids: @id_type@[])
    @form@          is the form's name: text or int
    @text_V@        (V the header's variable, e.g. @text_id@, @text_ids@) is V in the text form
                    and NULL in the int form; @int_V@ the other way round: the arguments of a
                    helper that takes both kinds, as advlock_edition_describe(k, ns, text_id, int_id)
                    and advlock_edition_set_keys do
and a line that ends in "-- @only FORM" is written in that form only (without the marker and the
blanks before it). The copies are separated by one empty line, as any two functions of
edition/src are. Any other @name@ in a template (except @extschema@, which the install replaces) is
an error, as is a block without its "-- @end forms". The bare-key form, (key bigint, ...) or
(keys bigint[], ...), is written separately: its body differs (no hash, no description).
Only edition/src and the templates of sql/templates/ (SQL_TEMPLATES: sql/fence.sql is written out
from sql/templates/fence.sql) are expanded; scripts/messages.py reads the expanded text too
(expand_forms).
"""
import re
import sys

repo = None  # the repository built from (main() sets it from the command line)
FORM_TYPES = {"text": "pg_catalog.text", "int": "pg_catalog.int8"}
FORMS_HEADER = re.compile(r"-- @forms (\w+): (\w+(?:, \w+)*)")
ONLY_MARKER = re.compile(r"\s+-- @only (\w+)$")
PLACEHOLDER = re.compile(r"@(\w+)@")


def expand_forms(sql, name):
    """(text, origins): sql with every -- @forms block written out once per form, and for each
    line of text the 1-based number of the line of sql it comes from."""
    lines = sql.split("\n")
    out, origins, i = [], [], 0
    while i < len(lines):
        header = FORMS_HEADER.fullmatch(lines[i])
        if not header:
            if "@forms" in lines[i] or "@only" in lines[i] or "@end forms" in lines[i]:
                sys.exit(f"build_edition: {name}:{i + 1}: a forms marker outside a -- @forms block: {lines[i]!r}")
            out.append(lines[i])
            origins.append(i + 1)
            i += 1
            continue
        var, forms = header.group(1), header.group(2).split(", ")
        if any(f not in FORM_TYPES for f in forms) or len(set(forms)) != len(forms):
            sys.exit(f"build_edition: {name}:{i + 1}: forms are {', '.join(FORM_TYPES)}, each once: {lines[i]!r}")
        try:
            end = lines.index("-- @end forms", i + 1)
        except ValueError:
            sys.exit(f"build_edition: {name}:{i + 1}: -- @forms without -- @end forms")
        for n, form in enumerate(forms):
            values = {"id_type": FORM_TYPES[form], "form": form}
            values.update({f"{f}_{var}": var if f == form else "NULL" for f in FORM_TYPES})
            if n:
                out.append("")
                origins.append(i + 1)
            for j in range(i + 1, end):
                line = lines[j]
                only = ONLY_MARKER.search(line)
                if only:
                    if only.group(1) not in FORM_TYPES:
                        sys.exit(f"build_edition: {name}:{j + 1}: no form {only.group(1)!r}")
                    if only.group(1) != form:
                        continue
                    line = line[:only.start()]
                if "@forms" in line or "@only" in line or "@end forms" in line:
                    sys.exit(f"build_edition: {name}:{j + 1}: a forms marker inside a template: {line!r}")

                def value(m, j=j):
                    if m.group(1) == "extschema":
                        return m.group(0)
                    if m.group(1) not in values:
                        sys.exit(f"build_edition: {name}:{j + 1}: unknown placeholder {m.group(0)}"
                                 f" (known: {', '.join('@' + v + '@' for v in values)})")
                    return values[m.group(1)]
                out.append(PLACEHOLDER.sub(value, line))
                origins.append(j + 1)
        i = end + 1
    return "\n".join(out), origins

# Objects that exist only in the extension, with the reason (the README lists them too).
PRELOAD_ONLY = ("advlock_stats", "advlock_stats_info", "advlock_stats_reset",
                # leases and semaphores: shared memory (pg_test/edition/extension_only.txt)
                "advlock_lease", "advlock_lease_renew", "advlock_lease_release",
                "advlock_lease_entries", "advlock_lease_stats", "advlock_leases",
                # leader election: leases (extension_only.txt)
                "advlock_campaign", "advlock_leader", "advlock_observe_leader", "advlock_resign",
                "advlock_lease_candidates", "advlock_term_stats",
                "advlock_lease_check", "advlock_lease_expiry",
                # the lock table's use: the lock manager's shared memory (extension_only.txt)
                "advlock_lock_table_entries", "advlock_lock_table",
                # the fences' hot path in Rust (src/fences.rs): the edition's advlock_fence is the
                # PL/pgSQL these two check with, and its table's guard calls advlock_fence_guard
                "advlock_fence_checked", "advlock_fence_update_check")

def read(path):
    return open(f"{repo}/{path}").read()

def statements(sql):
    """Top-level statements of a file that has no semicolons inside literals except in
    dollar-quoted bodies (true of the pieces used here)."""
    out, cur, tag = [], [], None
    for line in sql.splitlines(keepends=True):
        cur.append(line)
        for m in re.finditer(r"\$[A-Za-z_]*\$", line):
            tag = None if tag == m.group(0) else (tag or m.group(0))
        if tag is None and line.rstrip().endswith(";") and not line.lstrip().startswith("--"):
            out.append("".join(cur))
            cur = []
    rest = "".join(cur).strip()
    if rest and not all(line.strip().startswith("--") or not line.strip() for line in rest.splitlines()):
        sys.exit(f"build_edition: trailing text without ';': {rest[:80]!r}")
    return out

def edition_source(path):
    """A file of edition/src, its -- @forms blocks written out."""
    return expand_forms(read(path), path)[0]

def piece(name, sql):
    for delim in ("$advlock_edition$", "$advlock_piece$"):
        if delim in sql:
            sys.exit(f"build_edition: {name} contains {delim}")
    return (f"-- ---- {name} ----\n"
            "DO $advlock_edition$\nBEGIN\n"
            "    EXECUTE pg_catalog.replace($advlock_piece$\n"
            f"{sql.rstrip()}\n"
            "$advlock_piece$, '@extschema@', pg_catalog.quote_ident(pg_catalog.current_schema()));\n"
            "END\n$advlock_edition$;\n\n")

def replaceable(path, sql=None):
    """The extension's SQL file (or sql, its text), CREATE -> CREATE OR REPLACE (re-running
    upgrades in place)."""
    sql = read(path) if sql is None else sql
    sql = re.sub(r"^CREATE VIEW ", "CREATE OR REPLACE VIEW ", sql, flags=re.M)
    sql = re.sub(r"^CREATE FUNCTION ", "CREATE OR REPLACE FUNCTION ", sql, flags=re.M)
    if re.search(r"^CREATE (?!OR REPLACE)", sql, flags=re.M):
        sys.exit(f"build_edition: {path} creates something the edition cannot re-create")
    return sql

# The extension's SQL files written from a template of sql/templates/ (the same form templates):
# scripts/build_edition.sh writes them before building the edition, and --check checks them.
SQL_TEMPLATES = {"sql/fence.sql": "sql/templates/fence.sql"}
# Names a template writes as @name@ that differ between the extension and the edition: the
# PL/pgSQL advlock_fence is the edition's advlock_fence, and in the extension the checked path
# behind the Rust advlock_fence (src/fences.rs) -- its parameters are qualified by it too.
TEMPLATE_NAMES = {"fence": {"extension": "advlock_fence_checked", "edition": "advlock_fence"}}


def sql_from_template(path, side="extension"):
    """The extension's file path written out from its template for `side` (the extension, or the
    edition, which builds it in as the extension's): the template's first line (which says it is
    the source) replaced by one that says the file is generated."""
    template = SQL_TEMPLATES[path]
    source = read(template)
    for name, sides in TEMPLATE_NAMES.items():
        source = source.replace(f"@{name}@", sides[side])
    text = expand_forms(source, template)[0]
    first, _, rest = text.partition("\n")
    if not first.startswith("-- The source of "):
        sys.exit(f"build_edition: {template}: the first line must say it is the source of {path}")
    return (f"-- GENERATED by scripts/build_edition.sh from {template} (its form templates written out"
            f" once per form): edit that file, then rebuild.\n" + rest)


def main():
    global repo
    repo = sys.argv[1]
    if len(sys.argv) > 3 and sys.argv[2] == "--sql":
        sys.stdout.write(sql_from_template(sys.argv[3]))
        return
    version = re.search(r'^version\s*=\s*"([^"]+)"', open(f"{repo}/Cargo.toml").read(), re.M).group(1)
    holders = replaceable("sql/holders.sql")
    # sql/fence.sql as its template writes it for the edition (TEMPLATE_NAMES).
    fence = replaceable("sql/fence.sql", sql_from_template("sql/fence.sql", "edition"))
    metrics = replaceable("sql/metrics.sql")

    comments = []
    for stmt in statements(read("sql/comments.sql")):
        m = re.search(r"COMMENT ON (?:FUNCTION|VIEW|SEQUENCE|TABLE) @extschema@\.(\w+)", stmt)
        if not m:
            continue
        if m.group(1) in PRELOAD_ONLY:
            continue
        comments.append(stmt.strip("\n") + "\n")

    sys.stdout.write(f"""-- advlock {version}, SQL edition: the core API of the advlock extension in plain SQL and
-- PL/pgSQL, for servers that cannot load an extension library (Amazon RDS and Aurora, Cloud SQL,
-- Azure, ...). GENERATED by scripts/build_edition.sh from edition/src/*.sql and the extension's
-- sql/holders.sql, sql/metrics.sql and sql/comments.sql: edit those, then rebuild.
--
-- Install into a schema (the first schema of search_path; it must exist):
--     psql -v ON_ERROR_STOP=1 -d mydb -c 'CREATE SCHEMA IF NOT EXISTS advlock'
--     PGOPTIONS='-c search_path=advlock' psql -v ON_ERROR_STOP=1 -d mydb -f advlock_sql.sql
-- Upgrade: run a newer script the same way (CREATE OR REPLACE throughout).
-- Needs: CREATE on that schema, and PostgreSQL 15 or newer. Differences from the extension:
-- docs/sql-edition.md.

DO $advlock_edition$
BEGIN
    IF pg_catalog.current_schema() IS NULL THEN
        RAISE EXCEPTION 'advlock SQL edition: no schema to install into'
            USING HINT = 'The first schema of search_path must exist: CREATE SCHEMA it, or set search_path.';
    END IF;
    IF pg_catalog.current_setting('server_version_num')::pg_catalog.int4 OPERATOR(pg_catalog.<) 150000 THEN
        RAISE EXCEPTION 'advlock SQL edition needs PostgreSQL 15 or newer';
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'advlock') THEN
        RAISE EXCEPTION 'the advlock extension is installed in this database: the SQL edition is for databases without it'
            USING HINT = 'The extension already provides everything the edition does.';
    END IF;
END
$advlock_edition$;

""")
    sys.stdout.write(piece("edition/src/keys.sql", edition_source("edition/src/keys.sql")))
    sys.stdout.write(piece("edition/src/acquisition.sql", edition_source("edition/src/acquisition.sql")))
    sys.stdout.write(piece("edition/src/holders_support.sql", edition_source("edition/src/holders_support.sql")))
    sys.stdout.write(piece("sql/holders.sql (the extension's, CREATE OR REPLACE)", holders))
    sys.stdout.write(piece("edition/src/metrics.sql", edition_source("edition/src/metrics.sql")))
    sys.stdout.write(piece("sql/metrics.sql (the extension's, CREATE OR REPLACE)", metrics))
    sys.stdout.write(piece("edition/src/key_sets.sql", edition_source("edition/src/key_sets.sql")))
    sys.stdout.write(piece("edition/src/tokens.sql", edition_source("edition/src/tokens.sql")))
    sys.stdout.write(piece("sql/fence.sql (the extension's, CREATE OR REPLACE)", fence))
    sys.stdout.write(piece("edition/src/fence_table.sql", edition_source("edition/src/fence_table.sql")))
    edition_comments = edition_source("edition/src/comments.sql").replace("@VERSION@", version)
    sys.stdout.write(piece("edition/src/comments.sql", edition_comments))
    sys.stdout.write(piece("sql/comments.sql (the extension's, minus preload-only objects)", "".join(comments)))


if __name__ == "__main__":
    main()
