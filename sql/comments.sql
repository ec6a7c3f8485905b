-- One-line descriptions for \df+ and obj_description: every function and view of advlock has
-- one (pg_test/regress/sql/comments.sql fails when a new one lacks it). Runs last (finalize),
-- after every object exists. Each starts with "advlock:" so it is recognisable in \df+ output.

COMMENT ON FUNCTION @extschema@.advlock_key(pg_catalog.text, pg_catalog.text) IS
  'advlock: stable bigint lock key of (namespace, id), key spec v1 (SipHash-2-4 of ns || 0x00 || id in UTF-8); the same value in every client language and on every server';
COMMENT ON FUNCTION @extschema@.advlock_key(pg_catalog.text, pg_catalog.int8) IS
  'advlock: stable bigint lock key of (namespace, integer id); equals advlock_key(ns, id::text)';
COMMENT ON FUNCTION @extschema@.advlock_key(pg_catalog.text) IS
  'advlock: stable bigint lock key of a namespace alone; equals advlock_key(ns, '''')';

COMMENT ON FUNCTION @extschema@.advlock_try_with_timeout(pg_catalog.int8, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on key, waiting at most timeout_ms in the lock manager''s queue; true when held, false when the wait ran out (scope xact|session, mode exclusive|shared)';
COMMENT ON FUNCTION @extschema@.advlock_try_with_timeout(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on advlock_key(ns, id), waiting at most timeout_ms; true when held, false when the wait ran out (scope xact|session, mode exclusive|shared)';
COMMENT ON FUNCTION @extschema@.advlock_try_with_timeout(pg_catalog.text, pg_catalog.int8, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on advlock_key(ns, id), waiting at most timeout_ms; true when held, false when the wait ran out (scope xact|session, mode exclusive|shared)';

COMMENT ON FUNCTION @extschema@.advlock_lock_with_timeout(pg_catalog.int8, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on key, waiting at most timeout_ms; raises 55P03 naming the holder when the wait runs out';
COMMENT ON FUNCTION @extschema@.advlock_lock_with_timeout(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on advlock_key(ns, id), waiting at most timeout_ms; raises 55P03 naming the holder when the wait runs out';
COMMENT ON FUNCTION @extschema@.advlock_lock_with_timeout(pg_catalog.text, pg_catalog.int8, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on advlock_key(ns, id), waiting at most timeout_ms; raises 55P03 naming the holder when the wait runs out';

COMMENT ON FUNCTION @extschema@.advlock_unlock(pg_catalog.int8, pg_catalog.text) IS
  'advlock: release one session-scope hold of the advisory lock on key; false with a WARNING when none is held, like pg_advisory_unlock';
COMMENT ON FUNCTION @extschema@.advlock_unlock(pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
  'advlock: release one session-scope hold of the advisory lock on advlock_key(ns, id); false with a WARNING when none is held';
COMMENT ON FUNCTION @extschema@.advlock_unlock(pg_catalog.text, pg_catalog.int8, pg_catalog.text) IS
  'advlock: release one session-scope hold of the advisory lock on advlock_key(ns, id); false with a WARNING when none is held';

COMMENT ON FUNCTION @extschema@.advlock_try_all_with_timeout(pg_catalog.int8[], pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory locks on all keys (distinct, in ascending key order, so callers never deadlock each other) within one deadline of timeout_ms; true when every one is held, false (nothing taken by this call left held) when the deadline passed';
COMMENT ON FUNCTION @extschema@.advlock_try_all_with_timeout(pg_catalog.text, pg_catalog.text[], pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory locks on all advlock_key(ns, id) for each id (distinct, in ascending key order, so callers never deadlock each other) within one deadline of timeout_ms; true when every one is held, false (nothing taken by this call left held) when the deadline passed';
COMMENT ON FUNCTION @extschema@.advlock_try_all_with_timeout(pg_catalog.text, pg_catalog.int8[], pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory locks on all advlock_key(ns, id) for each id (distinct, in ascending key order, so callers never deadlock each other) within one deadline of timeout_ms; true when every one is held, false (nothing taken by this call left held) when the deadline passed';

COMMENT ON FUNCTION @extschema@.advlock_lock_all_with_timeout(pg_catalog.int8[], pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory locks on all keys within one deadline of timeout_ms, or none: raises 55P03 naming the busy key and its holder';
COMMENT ON FUNCTION @extschema@.advlock_lock_all_with_timeout(pg_catalog.text, pg_catalog.text[], pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory locks on all advlock_key(ns, id) for each id within one deadline of timeout_ms, or none: raises 55P03 naming the busy key and its holder';
COMMENT ON FUNCTION @extschema@.advlock_lock_all_with_timeout(pg_catalog.text, pg_catalog.int8[], pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory locks on all advlock_key(ns, id) for each id within one deadline of timeout_ms, or none: raises 55P03 naming the busy key and its holder';

COMMENT ON FUNCTION @extschema@.advlock_unlock_all(pg_catalog.int8[], pg_catalog.text) IS
  'advlock: release one session-scope hold of each distinct key of keys; true when every one was held (a WARNING for each that was not)';
COMMENT ON FUNCTION @extschema@.advlock_unlock_all(pg_catalog.text, pg_catalog.text[], pg_catalog.text) IS
  'advlock: release one session-scope hold of each distinct key of advlock_key(ns, id) for each id; true when every one was held (a WARNING for each that was not)';
COMMENT ON FUNCTION @extschema@.advlock_unlock_all(pg_catalog.text, pg_catalog.int8[], pg_catalog.text) IS
  'advlock: release one session-scope hold of each distinct key of advlock_key(ns, id) for each id; true when every one was held (a WARNING for each that was not)';

COMMENT ON FUNCTION @extschema@.advlock_try_with_token(pg_catalog.int8, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on key like advlock_try_with_timeout (default scope session) and return a fencing token, larger than every token issued before in this database, across restarts, crashes and standby promotions; NULL when the wait ran out';
COMMENT ON FUNCTION @extschema@.advlock_try_with_token(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on advlock_key(ns, id) (default scope session) and return a fencing token that only ever grows; NULL when the wait ran out';
COMMENT ON FUNCTION @extschema@.advlock_try_with_token(pg_catalog.text, pg_catalog.int8, pg_catalog.int4, pg_catalog.text, pg_catalog.text) IS
  'advlock: take the advisory lock on advlock_key(ns, id) (default scope session) and return a fencing token that only ever grows; NULL when the wait ran out';

COMMENT ON FUNCTION @extschema@.advlock_lease(pg_catalog.int8, pg_catalog.int4, pg_catalog.int4, pg_catalog.int4) IS
  'advlock: take a lease on key for ttl_ms, waiting at most timeout_ms (first come, first served; slots => N lets N leases hold the key); returns the lease id, which is its fencing token, or NULL when the wait ran out; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_lease(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.int4, pg_catalog.int4) IS
  'advlock: take a lease on advlock_key(ns, id) for ttl_ms, waiting at most timeout_ms; returns the lease id (its fencing token) or NULL when the wait ran out; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_lease(pg_catalog.text, pg_catalog.int8, pg_catalog.int4, pg_catalog.int4, pg_catalog.int4) IS
  'advlock: take a lease on advlock_key(ns, id) for ttl_ms, waiting at most timeout_ms; returns the lease id (its fencing token) or NULL when the wait ran out; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_lease_renew(pg_catalog.int8, pg_catalog.int4) IS
  'advlock: extend the lease to ttl_ms from now, from any connection of this database; false when it already ended (expired or released): the caller has lost it';
COMMENT ON FUNCTION @extschema@.advlock_lease_release(pg_catalog.int8) IS
  'advlock: end the lease now and hand its key to the next waiter; false when it had already ended';
COMMENT ON PROCEDURE @extschema@.advlock_wait_lock(pg_catalog.int8, pg_catalog.int4, pg_catalog.text, boolean) IS
  'advlock: CALL outside a transaction block: commit, then wait at most timeout_ms for a session lock on key holding no snapshot (so CREATE INDEX CONCURRENTLY does not wait for the waiter); acquired says whether it was granted';
COMMENT ON PROCEDURE @extschema@.advlock_wait_lease(pg_catalog.int8, pg_catalog.int4, pg_catalog.int4, pg_catalog.int4, pg_catalog.int8) IS
  'advlock: CALL outside a transaction block: commit, then wait at most timeout_ms for a lease on key holding no snapshot; lease is its id (fencing token) or NULL when the wait ran out; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_lease_entries() IS
  'advlock (internal, feeds the advlock_leases view; may change): one row per lease held or awaited in this database';
COMMENT ON FUNCTION @extschema@.advlock_lease_stats() IS
  'advlock (internal, feeds the advlock_lease_stats view; may change): lease table use and totals';
COMMENT ON FUNCTION @extschema@.advlock_lease_candidates() IS
  'advlock (internal, feeds advlock_leases.candidate; may change): the candidate of each election term held in this database, by lease id';
COMMENT ON FUNCTION @extschema@.advlock_term_stats() IS
  'advlock (internal, feeds the terms_* columns of advlock_lease_stats; may change): election terms started, expired and resigned since the server started';

COMMENT ON FUNCTION @extschema@.advlock_campaign(pg_catalog.int8, pg_catalog.int4, pg_catalog.int4, pg_catalog.text) IS
  'advlock: campaign for leadership of key: wait at most timeout_ms for its one-slot lease (first come, first served) and hold it for ttl_ms as candidate; returns the term (the lease id, a fencing token larger than every earlier term) or NULL when the wait ran out; renew with advlock_lease_renew, end with advlock_resign; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_campaign(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.int4, pg_catalog.text) IS
  'advlock: campaign for leadership of advlock_key(ns, id) as candidate for ttl_ms, waiting at most timeout_ms; returns the term (lease id, fencing token) or NULL when the wait ran out; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_campaign(pg_catalog.text, pg_catalog.int8, pg_catalog.int4, pg_catalog.int4, pg_catalog.text) IS
  'advlock: campaign for leadership of advlock_key(ns, id) as candidate for ttl_ms, waiting at most timeout_ms; returns the term (lease id, fencing token) or NULL when the wait ran out; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_leader(pg_catalog.int8) IS
  'advlock: the leader of key now: term, candidate, since, expires_at and the pid and application_name of its last renewal; no row when nobody leads; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_leader(pg_catalog.text, pg_catalog.text) IS
  'advlock: the leader of advlock_key(ns, id) now (term, candidate, since, expires_at, pid, application_name); no row when nobody leads; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_leader(pg_catalog.text, pg_catalog.int8) IS
  'advlock: the leader of advlock_key(ns, id) now (term, candidate, since, expires_at, pid, application_name); no row when nobody leads; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_observe_leader(pg_catalog.int8, pg_catalog.int4, pg_catalog.int8) IS
  'advlock: wait at most timeout_ms, without polling, until the leader of key differs from known_term (NULL: no leader), woken by a grant, a resignation or an expiry; one row: changed (false when the wait ran out) and the leader now (term NULL: none); needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_observe_leader(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.int8) IS
  'advlock: wait at most timeout_ms until the leader of advlock_key(ns, id) differs from known_term (NULL: no leader); one row: changed and the leader now (term NULL: none); needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_observe_leader(pg_catalog.text, pg_catalog.int8, pg_catalog.int4, pg_catalog.int8) IS
  'advlock: wait at most timeout_ms until the leader of advlock_key(ns, id) differs from known_term (NULL: no leader); one row: changed and the leader now (term NULL: none); needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_resign(pg_catalog.int8) IS
  'advlock: end the term now (release its lease) and hand the key to the next candidate; false when it had already ended (expired or released)';
COMMENT ON PROCEDURE @extschema@.advlock_wait_campaign(pg_catalog.int8, pg_catalog.int4, pg_catalog.int4, pg_catalog.text, pg_catalog.int8) IS
  'advlock: CALL outside a transaction block: commit, then campaign like advlock_campaign holding no snapshot; term is the term won or NULL when the wait ran out; needs shared_preload_libraries';
COMMENT ON PROCEDURE @extschema@.advlock_wait_leader(pg_catalog.int8, pg_catalog.int4, pg_catalog.int8, pg_catalog.int8, boolean, pg_catalog.text) IS
  'advlock: CALL outside a transaction block: commit, then observe like advlock_observe_leader holding no snapshot (for long waits: no xmin held back); term and candidate of the leader after the wait, changed whether it differs from known_term; needs shared_preload_libraries';

COMMENT ON FUNCTION @extschema@.advlock_holding(pg_catalog.int8, pg_catalog.text) IS
  'advlock: whether this backend holds the advisory lock on key in mode (any scope); the check a leader runs before each unit of work';
COMMENT ON FUNCTION @extschema@.advlock_holding(pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
  'advlock: whether this backend holds the advisory lock on advlock_key(ns, id) in mode (any scope)';
COMMENT ON FUNCTION @extschema@.advlock_holding(pg_catalog.text, pg_catalog.int8, pg_catalog.text) IS
  'advlock: whether this backend holds the advisory lock on advlock_key(ns, id) in mode (any scope)';

COMMENT ON FUNCTION @extschema@.advlock_idle_threshold(pg_catalog.interval) IS
  'advlock: the idle threshold in effect: older_than, or the advlock.idle_threshold setting when NULL; rejects a negative interval';
COMMENT ON FUNCTION @extschema@.advlock_lock_entries() IS
  'advlock (internal, may change): the advisory locks of this database as the lock manager holds them (key, mode, granted, pid, waiting_since), one row per lock entry; the 0.3.0 feed, kept for callers of that version and for the benchmarks'' comparison with advlock_holder_entries, which advlock_holders reads (the SQL edition has its own)';
COMMENT ON FUNCTION @extschema@.advlock_lock_table_entries() IS
  'advlock (internal, feeds the advlock_lock_table view; may change): shared lock table entries per database (by name), advisory entries among them, and the table''s capacity';
COMMENT ON FUNCTION @extschema@.advlock_holder_entries(pg_catalog.int4[]) IS
  'advlock (internal, feeds the advlock_holders view; may change): the advisory locks of this database from one snapshot of the lock table, with blocked_by for waiters and, preloaded, the recorded label, scope, held_since and token; pids: only the granted locks of those backends';
COMMENT ON FUNCTION @extschema@.advlock_idle_holder_rows(pg_catalog.interval, pg_catalog.text) IS
  'advlock (internal, behind advlock_idle_holders and advlock_terminate_idle_holders; may change): the idle-holder rows, most idle first; validates older_than and warns about hidden holders, naming caller';
COMMENT ON FUNCTION @extschema@.advlock_labels() IS
  'advlock (internal, may change): the labels (ns/id), scopes and hold times recorded for locks held in this database, one row per backend, key and mode (advlock_holder_entries looks each lock''s label up itself); no rows unless advlock is in shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_tokens() IS
  'advlock (internal, may change): the fencing tokens of locks held in this database through advlock_try_with_token, one row per backend, key and mode (the latest token; advlock_holder_entries looks each lock''s token up itself); no rows unless advlock is in shared_preload_libraries';
COMMENT ON SEQUENCE @extschema@.advlock_token_seq IS
  'advlock: the counter behind fencing tokens (advlock_try_with_token); do not change it by hand';
COMMENT ON FUNCTION @extschema@.advlock_idle_holders(pg_catalog.interval) IS
  'advlock: advlock_holders rows of granted locks whose backend has been idle for at least older_than (NULL: advlock.idle_threshold)';
COMMENT ON FUNCTION @extschema@.advlock_metrics() IS
  'advlock (internal, feeds the advlock_metrics view; may change): gauges per namespace and, preloaded, the acquisition counters, computed from the lock table and backend status without joining pg_stat_activity';
COMMENT ON FUNCTION @extschema@.advlock_leak_count(pg_catalog.interval) IS
  'advlock: number of backends holding advisory locks while idle for at least older_than (NULL: advlock.idle_threshold); alert when not 0';
COMMENT ON FUNCTION @extschema@.advlock_terminate_idle_holders(pg_catalog.interval, pg_catalog.bool) IS
  'advlock: list (dry_run => true, the default) or terminate (dry_run => false) the backends behind idle holders, with the caller''s own rights';

COMMENT ON FUNCTION @extschema@.advlock_stats() IS
  'advlock (internal, feeds the advlock_stats view; may change): per-namespace acquisition counters of this database; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_stats_info() IS
  'advlock (internal, feeds the advlock_stats_info view; may change): fill level of the shared label and statistics tables; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_stats_reset(pg_catalog.text) IS
  'advlock: reset the statistics of namespace ns in this database, or of every namespace when ns is NULL; returns the reset time; needs shared_preload_libraries';

COMMENT ON TABLE @extschema@.advlock_fences IS
  'advlock: one row per fence: the largest token that passed advlock_fence for key (ns, id as first given), when (passed_at: the statement''s start) and by which role; in pg_dump''s output';
COMMENT ON FUNCTION @extschema@.advlock_fence(pg_catalog.int8, pg_catalog.int8) IS
  'advlock: in a write transaction, let token pass the fence of key: raises LK001 when a larger token has passed it, else records token (an equal one passes again: retries); the fence''s row stays locked until the transaction ends, so the check commits or rolls back with the write';
COMMENT ON FUNCTION @extschema@.advlock_fence(pg_catalog.text, pg_catalog.text, pg_catalog.int8) IS
  'advlock: in a write transaction, let token pass the fence of advlock_key(ns, id): raises LK001 when a larger token has passed it, else records token until the transaction ends';
COMMENT ON FUNCTION @extschema@.advlock_fence(pg_catalog.text, pg_catalog.int8, pg_catalog.int8) IS
  'advlock: in a write transaction, let token pass the fence of advlock_key(ns, id): raises LK001 when a larger token has passed it, else records token until the transaction ends';
COMMENT ON FUNCTION @extschema@.advlock_fence_reset(pg_catalog.int8) IS
  'advlock: forget the fence of key (any token passes next); needs DELETE on advlock_fences (its owner, superusers); returns the token it had, or NULL';
COMMENT ON FUNCTION @extschema@.advlock_fence_reset(pg_catalog.text, pg_catalog.text) IS
  'advlock: forget the fence of advlock_key(ns, id); needs DELETE on advlock_fences; returns the token it had, or NULL';
COMMENT ON FUNCTION @extschema@.advlock_fence_reset(pg_catalog.text, pg_catalog.int8) IS
  'advlock: forget the fence of advlock_key(ns, id); needs DELETE on advlock_fences; returns the token it had, or NULL';
COMMENT ON FUNCTION @extschema@.advlock_fence_guard() IS
  'advlock (internal, trigger of advlock_fences; may change): refuses an update that lowers a token or changes the key';
COMMENT ON FUNCTION @extschema@.advlock_fence_checked(pg_catalog.int8, pg_catalog.int8) IS
  'advlock (internal, may change): advlock_fence in PL/pgSQL, which advlock_fence calls for what it does not pass itself: checks the arguments, passes or refuses (LK001)';
COMMENT ON FUNCTION @extschema@.advlock_fence_checked(pg_catalog.text, pg_catalog.text, pg_catalog.int8) IS
  'advlock (internal, may change): advlock_fence(ns, id text, token) in PL/pgSQL, which advlock_fence calls for what it does not pass itself';
COMMENT ON FUNCTION @extschema@.advlock_fence_checked(pg_catalog.text, pg_catalog.int8, pg_catalog.int8) IS
  'advlock (internal, may change): advlock_fence(ns, id bigint, token) in PL/pgSQL, which advlock_fence calls for what it does not pass itself';
COMMENT ON FUNCTION @extschema@.advlock_fence_update_check() IS
  'advlock (internal, trigger of advlock_fences; may change): passes an update that keeps the key and does not lower the token, hands any other to advlock_fence_guard';
COMMENT ON FUNCTION @extschema@.advlock_lease_check(pg_catalog.int8) IS
  'advlock: in a write transaction, raise LK002 when lease is no longer held (released, expired, or its grant lost in a failover); returns its expires_at otherwise; needs shared_preload_libraries';
COMMENT ON FUNCTION @extschema@.advlock_lease_expiry(pg_catalog.int8, pg_catalog.text) IS
  'advlock (internal, behind advlock_lease_check; may change): expires_at of lease while an entry of the lease table holds it (possibly past), else NULL; needs shared_preload_libraries, naming caller';
