-- advlock_fences: one row per fence (docs/fences.md), written by advlock_fence (sql/fence.sql).
-- The extension's; the SQL edition creates the same table in edition/src/fence_table.sql.
--
-- Who may do what, by the table's own privileges (no SECURITY DEFINER):
--  * pass a fence (advlock_fence): INSERT on key, token, ns, id and UPDATE on token, passed_at,
--    passed_by -- granted to PUBLIC, as every advlock function is; REVOKE them and grant them to
--    the writer roles to restrict it. passed_at and passed_by are filled by their defaults (the
--    statement's start, the current role): PUBLIC cannot insert other values (a role that
--    updates the table by hand can write others there: they are information, not the fence).
--    The guard trigger refuses an update that lowers a token or changes the key: that is a
--    reset, for those who may reset. (It checks nothing else: its check runs on every pass of
--    every fence -- comparing passed_by with the current role alone cost a third of the upsert
--    in bench case 11. It is Rust, advlock_fence_update_check (src/fences.rs), without a WHEN
--    clause, which PostgreSQL would parse and plan anew in every statement; on a refusal it
--    calls the PL/pgSQL advlock_fence_guard, which raises. The SQL edition's trigger is the
--    WHEN form of the same two conditions, edition/src/fence_table.sql.)
--  * reset a fence (advlock_fence_reset): DELETE, which only the owner has -- the role that ran
--    CREATE EXTENSION (@extowner@: in a trusted install the database owner, not the bootstrap
--    superuser the script runs as) -- and superusers; they may grant it;
--  * read: everyone (SELECT to PUBLIC), like advlock_holders.
-- Its rows are part of pg_dump's output (pg_extension_config_dump), so a restored database
-- keeps its fences (and advlock_token_seq its position); a restore inserts them as the owner,
-- which has every column.

CREATE TABLE @extschema@.advlock_fences (
    key       pg_catalog.int8 NOT NULL,
    token     pg_catalog.int8 NOT NULL,
    ns        pg_catalog.text,
    id        pg_catalog.text,
    passed_at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp(),
    passed_by pg_catalog.text NOT NULL DEFAULT CURRENT_USER,
    CONSTRAINT advlock_fences_pkey PRIMARY KEY (key)
);

CREATE TRIGGER advlock_fences_guard BEFORE UPDATE ON @extschema@.advlock_fences FOR EACH ROW
    EXECUTE FUNCTION @extschema@.advlock_fence_update_check();

ALTER TABLE @extschema@.advlock_fences OWNER TO @extowner@;
GRANT SELECT, INSERT (key, token, ns, id), UPDATE (token, passed_at, passed_by)
   ON @extschema@.advlock_fences TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.advlock_fences', '');
