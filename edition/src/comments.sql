-- advlock SQL edition: the version, and the descriptions of the edition's own helpers. The
-- API's descriptions are the extension's (sql/comments.sql), appended by the build.

-- Which edition script is installed (the extension's version it follows).
CREATE OR REPLACE FUNCTION @extschema@.advlock_edition_version()
RETURNS pg_catalog.text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN '@VERSION@';

COMMENT ON FUNCTION @extschema@.advlock_edition_version() IS
  'advlock SQL edition: the advlock version whose core API this script provides';
COMMENT ON FUNCTION @extschema@.advlock_edition_siphash24(pg_catalog.bytea) IS
  'advlock SQL edition (internal): SipHash-2-4 with an all-zero key of a message, as a signed bigint';
COMMENT ON FUNCTION @extschema@.advlock_edition_check_target(pg_catalog.text, pg_catalog.text, pg_catalog.bool) IS
  'advlock SQL edition (internal): raises the extension''s error for a NULL or empty ns or a NULL id';
COMMENT ON FUNCTION @extschema@.advlock_edition_display(pg_catalog.text) IS
  'advlock SQL edition (internal): an argument as messages show it (at most 64 characters)';
COMMENT ON FUNCTION @extschema@.advlock_edition_held(pg_catalog.int8, pg_catalog.bool) IS
  'advlock SQL edition (internal): whether this backend holds the advisory lock on key in this mode';
COMMENT ON FUNCTION @extschema@.advlock_edition_wait(pg_catalog.int8, pg_catalog.bool, pg_catalog.bool, pg_catalog.int4) IS
  'advlock SQL edition (internal): the bounded wait under a temporary lock_timeout, restored on exit';
COMMENT ON FUNCTION @extschema@.advlock_edition_acquire(pg_catalog.text, pg_catalog.int8, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock SQL edition (internal): argument checks, a no-wait try, then the bounded wait';
COMMENT ON FUNCTION @extschema@.advlock_edition_scope(pg_catalog.text, pg_catalog.text) IS
  'advlock SQL edition (internal): checks a scope argument; true for session';
COMMENT ON FUNCTION @extschema@.advlock_edition_mode(pg_catalog.text, pg_catalog.text) IS
  'advlock SQL edition (internal): checks a mode argument; true for shared';
COMMENT ON FUNCTION @extschema@.advlock_edition_raise_timeout(pg_catalog.int8, pg_catalog.text, pg_catalog.int4, pg_catalog.text, pg_catalog.timestamptz) IS
  'advlock SQL edition (internal): advlock_lock_with_timeout''s 55P03 error, naming the holders';
COMMENT ON FUNCTION @extschema@.advlock_edition_describe(pg_catalog.int8, pg_catalog.text, pg_catalog.text, pg_catalog.int8) IS
  'advlock SQL edition (internal): "key N = advlock_key(ns, id)" for messages';
