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
COMMENT ON FUNCTION @extschema@.advlock_edition_null_key(pg_catalog.text, pg_catalog.text) IS
  'advlock SQL edition (internal): raises the extension''s error for a NULL key argument';
COMMENT ON FUNCTION @extschema@.advlock_edition_check_target(pg_catalog.text, pg_catalog.text, pg_catalog.bool) IS
  'advlock SQL edition (internal): raises the extension''s error for a NULL or empty ns or a NULL id';
COMMENT ON FUNCTION @extschema@.advlock_edition_display(pg_catalog.text) IS
  'advlock SQL edition (internal): an argument as messages show it (at most 64 characters)';
COMMENT ON FUNCTION @extschema@.advlock_edition_held(pg_catalog.int8, pg_catalog.bool) IS
  'advlock SQL edition (internal): whether this backend holds the advisory lock on key in this mode';
COMMENT ON FUNCTION @extschema@.advlock_edition_wait(pg_catalog.int8, pg_catalog.bool, pg_catalog.bool, pg_catalog.int4) IS
  'advlock SQL edition (internal): the bounded wait under a temporary lock_timeout, restored on exit';
COMMENT ON FUNCTION @extschema@.advlock_edition_acquire(pg_catalog.text, pg_catalog.int8[], pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.bool) IS
  'advlock SQL edition (internal): the acquisition of one key or of a key set (all or none, in a subtransaction): argument checks, then each key by a no-wait try and the bounded wait within one deadline';
COMMENT ON FUNCTION @extschema@.advlock_edition_take(pg_catalog.int8, pg_catalog.bool, pg_catalog.bool, pg_catalog.int4) IS
  'advlock SQL edition (internal): one key of an acquisition: a no-wait try, then the bounded wait';
COMMENT ON FUNCTION @extschema@.advlock_edition_scope(pg_catalog.text, pg_catalog.text) IS
  'advlock SQL edition (internal): checks a scope argument; true for session';
COMMENT ON FUNCTION @extschema@.advlock_edition_mode(pg_catalog.text, pg_catalog.text) IS
  'advlock SQL edition (internal): checks a mode argument; true for shared';
COMMENT ON FUNCTION @extschema@.advlock_edition_raise_timeout(pg_catalog.int8, pg_catalog.text, pg_catalog.int4, pg_catalog.text, pg_catalog.int8) IS
  'advlock SQL edition (internal): advlock_lock_with_timeout''s 55P03 error, naming the holders';
COMMENT ON FUNCTION @extschema@.advlock_edition_release_quietly(pg_catalog.int8, pg_catalog.bool) IS
  'advlock SQL edition (internal): pg_advisory_unlock or pg_advisory_unlock_shared with the built-in''s WARNING kept from the client';
COMMENT ON FUNCTION @extschema@.advlock_edition_release(pg_catalog.text, pg_catalog.int8, pg_catalog.bool, pg_catalog.text) IS
  'advlock SQL edition (internal): one session hold released, or false with a WARNING naming the key and what this session holds of it instead';
COMMENT ON FUNCTION @extschema@.advlock_edition_describe(pg_catalog.int8, pg_catalog.text, pg_catalog.text, pg_catalog.int8) IS
  'advlock SQL edition (internal): "key N" or "key N = advlock_key(ns, id)" for messages';
COMMENT ON FUNCTION @extschema@.advlock_edition_check_timeout(pg_catalog.text, pg_catalog.int4) IS
  'advlock SQL edition (internal): checks a timeout_ms argument (not NULL, not negative)';
COMMENT ON FUNCTION @extschema@.advlock_edition_preflight(pg_catalog.text, pg_catalog.bool) IS
  'advlock SQL edition (internal): the hot-standby refusal and the xact-outside-a-block WARNING of every acquisition';
COMMENT ON FUNCTION @extschema@.advlock_edition_holders(pg_catalog.int8, pg_catalog.text) IS
  'advlock SQL edition (internal): the DETAIL of a timeout error, naming the holders of a key';
COMMENT ON FUNCTION @extschema@.advlock_edition_check_set(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.int8) IS
  'advlock SQL edition (internal): raises the extension''s error for an empty key array or a NULL element';
COMMENT ON FUNCTION @extschema@.advlock_edition_set_keys(pg_catalog.text, pg_catalog.int8[], pg_catalog.text, pg_catalog.text[], pg_catalog.int8[], pg_catalog.text) IS
  'advlock SQL edition (internal): the checked keys of an all-or-nothing call, in the caller''s order';
COMMENT ON FUNCTION @extschema@.advlock_edition_give_back(pg_catalog.int8[], pg_catalog.int4, pg_catalog.bool) IS
  'advlock SQL edition (internal): releases the session holds an all-or-nothing call took, newest first';
COMMENT ON FUNCTION @extschema@.advlock_edition_lock_all(pg_catalog.int8[], pg_catalog.text, pg_catalog.text[], pg_catalog.int8[], pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock SQL edition (internal): advlock_lock_all_with_timeout once the keys are known, with its 55P03 error';
COMMENT ON FUNCTION @extschema@.advlock_edition_unlock_all(pg_catalog.int8[], pg_catalog.text, pg_catalog.text[], pg_catalog.int8[], pg_catalog.text) IS
  'advlock SQL edition (internal): advlock_unlock_all once the keys are known';
COMMENT ON FUNCTION @extschema@.advlock_edition_token(pg_catalog.int8, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock SQL edition (internal): advlock_try_with_token once the target is checked: acquisition, then (timeline << 47) | nextval';
