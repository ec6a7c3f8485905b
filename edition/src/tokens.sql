-- advlock SQL edition: fencing tokens, advlock_try_with_token (src/fencing.rs).
--
-- token = (WAL insertion timeline << 47) | n, n from the sequence advlock_token_seq of the
-- edition's schema (same bounds as the extension's). The timeline is the one
-- pg_walfile_name(pg_current_wal_insert_lsn()) names a WAL file with: GetWALInsertionTimeLine()
-- since PostgreSQL 15, as the extension reads it. A promoted standby's tokens are therefore
-- larger than every token of the old primary.
--
-- Differences (docs/sql-edition.md):
--  * the extension flushes WAL before it returns a token whose draw wrote WAL (a sequence is
--    WAL-logged 32 values ahead); SQL cannot force a flush. nextval gives the transaction an
--    XID when it WAL-logs, so the caller's COMMIT (synchronous_commit on) flushes it: a token is
--    durable once the transaction that drew it has committed. One the client acts on before
--    that commit (or drawn in a transaction that rolls back, or with synchronous_commit off)
--    could be drawn again after a crash of the server, unless other WAL flushed it meanwhile.
--  * nextval checks the caller's privileges and the extension's does not: the edition grants
--    USAGE on the sequence to PUBLIC (no SECURITY DEFINER), so anyone who may use the schema can
--    also call nextval on it directly -- which only advances the counter (tokens still only grow);
--    setval needs UPDATE, which nobody but the owner has.

-- Created once; a re-run (upgrade) keeps it and its value.
DO $seq$
BEGIN
    IF pg_catalog.to_regclass('@extschema@.advlock_token_seq') IS NULL THEN
        CREATE SEQUENCE @extschema@.advlock_token_seq MINVALUE 1 MAXVALUE 140737488355327 NO CYCLE;
    END IF;
END
$seq$;
GRANT USAGE ON SEQUENCE @extschema@.advlock_token_seq TO PUBLIC;

-- The whole call after the target was checked: argument checks, refusal where no WAL can be
-- written (before any lock is taken), the acquisition of advlock_try_with_timeout, then a token.
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_token(key pg_catalog.int8, timeout_ms pg_catalog.int4,
                                                            scope pg_catalog.text, mode pg_catalog.text)
RETURNS pg_catalog.int8
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    fn constant text := 'advlock_try_with_token';
    place text;
    timeline bigint;
BEGIN
    PERFORM @extschema@.advlock_edition_check_timeout(fn, timeout_ms);
    PERFORM @extschema@.advlock_edition_scope(fn, scope);
    PERFORM @extschema@.advlock_edition_mode(fn, mode);
    IF pg_is_in_recovery() THEN
        place := 'on a hot standby';
    ELSIF current_setting('transaction_read_only') = 'on' THEN
        place := 'in a read-only transaction';
    END IF;
    IF place IS NOT NULL THEN
        RAISE EXCEPTION '% cannot run %', fn, place
            USING ERRCODE = 'read_only_sql_transaction',
                  DETAIL = 'A fencing token is drawn from a WAL-logged sequence, which needs a writable transaction on the primary.',
                  HINT = 'Call it on the primary, outside read-only transactions (default_transaction_read_only = off).';
    END IF;
    IF (@extschema@.advlock_edition_acquire(fn, ARRAY[key], timeout_ms, scope, mode, false)).busy_key IS NOT NULL THEN
        RETURN NULL;
    END IF;
    -- The first 8 hex digits of a WAL file name are its timeline.
    timeline := ('x' || left(pg_walfile_name(pg_current_wal_insert_lsn()), 8))::bit(32)::bigint;
    IF timeline > 65535 THEN
        RAISE EXCEPTION 'timeline % is beyond what fencing tokens can carry (65535)', timeline
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    RETURN (timeline << 47) | nextval('@extschema@.advlock_token_seq'::regclass);
END
$fn$;

CREATE OR REPLACE FUNCTION @extschema@.advlock_try_with_token(key pg_catalog.int8, timeout_ms pg_catalog.int4,
                                                             scope pg_catalog.text DEFAULT 'session',
                                                             mode pg_catalog.text DEFAULT 'exclusive')
RETURNS pg_catalog.int8
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF key IS NULL THEN
        PERFORM @extschema@.advlock_edition_null_key('advlock_try_with_token', 'key');
    END IF;
    RETURN @extschema@.advlock_edition_token(key, timeout_ms, scope, mode);
END
$fn$;

-- @forms id: text, int
CREATE OR REPLACE FUNCTION @extschema@.advlock_try_with_token(ns pg_catalog.text, id @id_type@, timeout_ms pg_catalog.int4,
                                                             scope pg_catalog.text DEFAULT 'session',
                                                             mode pg_catalog.text DEFAULT 'exclusive')
RETURNS pg_catalog.int8
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF ns IS NULL OR ns = '' OR id IS NULL THEN
        PERFORM @extschema@.advlock_edition_check_target('advlock_try_with_token', ns, id IS NULL);
    END IF;
    RETURN @extschema@.advlock_edition_token(@extschema@.advlock_key(ns, id), timeout_ms, scope, mode);
END
$fn$;
-- @end forms
