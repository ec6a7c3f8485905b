-- advlock SQL edition: the table of fences, advlock_fences (the extension's: sql/fence_table.sql;
-- the functions that write it, sql/fence.sql, are the extension's as written).
--
-- Differences (docs/sql-edition.md): the table belongs to the role that ran the script (the
-- extension's to the role that ran CREATE EXTENSION) and is an ordinary table, in pg_dump's
-- output as any other. The privileges are the extension's: PUBLIC may pass fences and read
-- them; resetting one (DELETE) is for the owner and superusers.

-- Created once; a re-run (upgrade) keeps it and its rows.
DO $tbl$
BEGIN
    IF pg_catalog.to_regclass('@extschema@.advlock_fences') IS NULL THEN
        CREATE TABLE @extschema@.advlock_fences (
            key       pg_catalog.int8 NOT NULL,
            token     pg_catalog.int8 NOT NULL,
            ns        pg_catalog.text,
            id        pg_catalog.text,
            passed_at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
            passed_by pg_catalog.text NOT NULL DEFAULT CURRENT_USER,
            CONSTRAINT advlock_fences_pkey PRIMARY KEY (key)
        );
    END IF;
END
$tbl$;

CREATE OR REPLACE TRIGGER advlock_fences_guard BEFORE UPDATE ON @extschema@.advlock_fences FOR EACH ROW
    WHEN (NEW.token OPERATOR(pg_catalog.<) OLD.token OR NEW.key OPERATOR(pg_catalog.<>) OLD.key)
    EXECUTE FUNCTION @extschema@.advlock_fence_guard();

GRANT SELECT, INSERT (key, token, ns, id), UPDATE (token, passed_at, passed_by)
   ON @extschema@.advlock_fences TO PUBLIC;
