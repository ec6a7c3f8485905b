-- Moves a database from the advlock SQL edition to the advlock extension without changing a
-- key. Run it once the extension is installed on the server, as a role that may CREATE
-- EXTENSION advlock (a trusted extension: the database owner will do), with the edition's
-- schema first in search_path, as for the install:
--     PGOPTIONS='-c search_path=advlock' psql -v ON_ERROR_STOP=1 -d mydb -f move_to_extension.sql
--
-- What it does, in one transaction (all or nothing):
--  1. Renames the edition's three advlock_key functions to advlock_edition_key. Generated
--     columns, expression indexes, views and SQL-standard function bodies refer to a function
--     by its OID, not its name: they keep working through the renamed functions, and since
--     both implementations compute the same keys, the stored values and indexes stay valid.
--  2. Drops every other object of the edition, without CASCADE: if one of your objects
--     depends on one (a view over advlock_holders, say), the move stops, names it, and leaves
--     the database as it was.
--  3. CREATE EXTENSION advlock in the same schema: every call that names advlock_* resolves
--     to the extension from now on. The extension's fencing-token counter continues from the
--     edition's (setval on the extension's sequence: where the edition has issued tokens, a
--     role that may do that -- a superuser -- must run the move).
--     The fences (advlock_fences) move too: the edition's table is set aside, and its rows are
--     copied into the extension's table (owned by the role running the move, who must own the
--     edition's table or be a superuser); privileges granted on the edition's table are not
--     carried over (the extension's are its defaults).
--  4. Lists, as NOTICEs, the objects still bound to advlock_edition_key, to be rebound when
--     convenient (docs/sql-edition.md, "Moving to the extension"); then advlock_edition_key and its two
--     helpers can be dropped.
BEGIN;

DO $advlock_move$
DECLARE
    s text := pg_catalog.quote_ident(pg_catalog.current_schema());
    sig text;
    r record;
    last_token bigint;
    fences boolean := false;
BEGIN
    IF pg_catalog.to_regprocedure(s || '.advlock_edition_version()') IS NULL THEN
        RAISE EXCEPTION 'the advlock SQL edition is not installed in schema %', s
            USING HINT = 'Put the schema the edition was installed into first in search_path.';
    END IF;
    FOREACH sig IN ARRAY ARRAY['text, text', 'text, bigint', 'text'] LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %s.advlock_key(%s) RENAME TO advlock_edition_key', s, sig);
    END LOOP;
    -- The fences' table, set aside with its rows: its guard trigger calls an edition function
    -- (dropped below), and its name and its primary key's are the extension's.
    IF pg_catalog.to_regclass(s || '.advlock_fences') IS NOT NULL THEN
        EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS advlock_fences_guard ON %s.advlock_fences', s);
        EXECUTE pg_catalog.format('ALTER TABLE %s.advlock_fences RENAME CONSTRAINT advlock_fences_pkey TO advlock_edition_fences_pkey', s);
        EXECUTE pg_catalog.format('ALTER TABLE %s.advlock_fences RENAME TO advlock_edition_fences', s);
        fences := true;
    END IF;
    -- The holders functions first (they depend on the view), then the views, then the rest.
    EXECUTE pg_catalog.format('DROP FUNCTION %s.advlock_terminate_idle_holders(interval, boolean)', s);
    EXECUTE pg_catalog.format('DROP FUNCTION %s.advlock_idle_holders(interval)', s);
    EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS %s.advlock_idle_holder_rows(interval, text)', s);
    EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS %s.advlock_leak_count(interval)', s);
    EXECUTE pg_catalog.format('DROP VIEW %s.advlock_holders', s);
    -- The view's feed (its SQL-standard body depends on advlock_lock_entries).
    EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS %s.advlock_holder_entries(pg_catalog.int4[])', s);
    EXECUTE pg_catalog.format('DROP VIEW IF EXISTS %s.advlock_metrics', s);
    -- Its SQL-standard body depends on advlock_idle_threshold and advlock_lock_entries.
    EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS %s.advlock_metrics()', s);
    FOR r IN
        SELECT p.oid::pg_catalog.regprocedure AS f
          FROM pg_catalog.pg_proc p
         WHERE p.pronamespace OPERATOR(pg_catalog.=) s::pg_catalog.regnamespace
           AND p.proname LIKE 'advlock\_%'
           -- kept: the renamed key functions and what they call
           AND p.proname NOT IN ('advlock_edition_key', 'advlock_edition_siphash24', 'advlock_edition_check_target')
         -- advlock_edition_describe's SQL body depends on advlock_edition_display: that one last
         ORDER BY p.proname OPERATOR(pg_catalog.=) 'advlock_edition_display'
    LOOP
        EXECUTE pg_catalog.format('DROP FUNCTION %s', r.f);
    END LOOP;
    -- The fencing-token counter: the extension's own sequence takes over from where the
    -- edition's stopped, so tokens keep growing across the move (same timeline bits).
    IF pg_catalog.to_regclass(s || '.advlock_token_seq') IS NOT NULL THEN
        EXECUTE pg_catalog.format('SELECT CASE WHEN is_called THEN last_value END FROM %s.advlock_token_seq', s)
            INTO last_token;
        EXECUTE pg_catalog.format('DROP SEQUENCE %s.advlock_token_seq', s);
    END IF;
    EXECUTE pg_catalog.format('CREATE EXTENSION advlock SCHEMA %s', s);
    IF fences THEN
        EXECUTE pg_catalog.format('INSERT INTO %1$s.advlock_fences (key, token, ns, id, passed_at, passed_by) '
                                  'SELECT f.key, f.token, f.ns, f.id, f.passed_at, f.passed_by FROM %1$s.advlock_edition_fences f', s);
        EXECUTE pg_catalog.format('DROP TABLE %s.advlock_edition_fences', s);
    END IF;
    IF last_token IS NOT NULL THEN
        BEGIN
            PERFORM pg_catalog.setval(pg_catalog.format('%s.advlock_token_seq', s)::pg_catalog.regclass, last_token, true);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'the extension''s fencing-token counter cannot be set to continue the edition''s (%)', last_token
                USING ERRCODE = 'insufficient_privilege',
                      DETAIL = 'The edition has issued fencing tokens; the extension''s must stay above them, and its sequence belongs to the extension''s owner.',
                      HINT = 'Run the move as a superuser. Nothing was changed.';
        END;
    END IF;
    FOR r IN
        SELECT DISTINCT pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid) AS what
          FROM pg_catalog.pg_depend d
         WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
           AND d.refobjid IN (SELECT p.oid FROM pg_catalog.pg_proc p
                               WHERE p.pronamespace OPERATOR(pg_catalog.=) s::pg_catalog.regnamespace
                                 AND p.proname OPERATOR(pg_catalog.=) 'advlock_edition_key')
         ORDER BY 1
    LOOP
        RAISE NOTICE 'still computed by the edition''s key function (same keys, slower): %', r.what;
    END LOOP;
END
$advlock_move$;

COMMIT;
