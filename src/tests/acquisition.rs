// pg_test functions must live in a module named `tests` (pgrx calls "tests"."name"()).
#[pgrx::pg_schema]
mod tests {
    use crate::tests::{error_of, one_bool, one_i64, one_text};
    use pgrx::prelude::*;

    /// Locks this backend holds on int8 advisory key `key`, as "mode:count" rows from pg_locks.
    fn my_locks(key: i64) -> i64 {
        one_i64(&format!(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
               AND objsubid = 1 AND classid = (({key}::bigint >> 32) & 4294967295)::oid
               AND objid = ({key}::bigint & 4294967295)::oid AND granted"
        ))
    }

    #[pg_test]
    fn try_takes_an_xact_lock_with_the_builtin_tag() {
        assert!(one_bool("SELECT advlock_try_with_timeout(-4201, 0)"));
        assert_eq!(my_locks(-4201), 1);
        // The built-in sees the same lock: unlocking at session level finds no session lock,
        // while pg_try_advisory_xact_lock re-enters it.
        assert!(one_bool("SELECT pg_try_advisory_xact_lock(-4201)"));
        assert_eq!(my_locks(-4201), 1, "same tag, same pg_locks entry");
    }

    #[pg_test]
    fn ns_id_forms_lock_advlock_key() {
        assert!(one_bool(
            "SELECT advlock_try_with_timeout('t-forms', 42, 0)"
        ));
        assert_eq!(my_locks(one_i64("SELECT advlock_key('t-forms', 42)")), 1);
        assert!(one_bool(
            "SELECT advlock_try_with_timeout('t-forms', 'nightly', timeout_ms => 100)"
        ));
        assert_eq!(
            my_locks(one_i64("SELECT advlock_key('t-forms', 'nightly')")),
            1
        );
    }

    #[pg_test]
    fn session_scope_and_unlock_count_like_the_builtins() {
        assert!(one_bool("SELECT advlock_try_with_timeout('t-session', 'nightly', timeout_ms => 2000, scope => 'session')"));
        assert!(one_bool(
            "SELECT advlock_try_with_timeout('t-session', 'nightly', 0, 'session')"
        ));
        // Two holds, two releases; the third finds nothing (with a WARNING naming the key).
        assert!(one_bool("SELECT advlock_unlock('t-session', 'nightly')"));
        assert_eq!(
            my_locks(one_i64("SELECT advlock_key('t-session', 'nightly')")),
            1
        );
        assert!(one_bool(
            "SELECT advlock_unlock(advlock_key('t-session', 'nightly'))"
        ));
        assert_eq!(
            my_locks(one_i64("SELECT advlock_key('t-session', 'nightly')")),
            0
        );
        assert!(!one_bool("SELECT advlock_unlock('t-session', 'nightly')"));
        // Interop: a session lock taken by the built-in is released by advlock_unlock.
        Spi::run("SELECT pg_advisory_lock(advlock_key('t-session', 7))").unwrap();
        assert!(one_bool("SELECT advlock_unlock('t-session', 7)"));
        assert_eq!(my_locks(one_i64("SELECT advlock_key('t-session', 7)")), 0);
    }

    #[pg_test]
    fn shared_mode_is_share_lock() {
        assert!(one_bool(
            "SELECT advlock_try_with_timeout(7007, 0, 'session', 'shared')"
        ));
        assert!(one_bool(
            "SELECT advlock_try_with_timeout(7007, 0, mode => 'shared', scope => 'session')"
        ));
        assert_eq!(
            one_text("SELECT string_agg(mode, ',') FROM pg_locks WHERE locktype = 'advisory' AND objid = 7007 AND pid = pg_backend_pid()"),
            "ShareLock"
        );
        assert!(
            !one_bool("SELECT advlock_unlock(7007)"),
            "no exclusive session lock is held"
        );
        assert!(one_bool("SELECT advlock_unlock(7007, 'shared')"));
        assert!(one_bool("SELECT advlock_unlock(7007, mode => 'shared')"));
        assert_eq!(my_locks(7007), 0);
    }

    #[pg_test]
    fn lock_with_timeout_returns_void_when_acquired() {
        Spi::run("SELECT advlock_lock_with_timeout('t-void', '42', 100)").unwrap();
        Spi::run("SELECT advlock_lock_with_timeout(9909, 0, scope => 'session')").unwrap();
        assert_eq!(my_locks(9909), 1);
        assert!(one_bool("SELECT advlock_unlock(9909)"));
    }

    #[pg_test]
    fn lock_timeout_untouched_on_the_fast_path() {
        Spi::run("SET LOCAL lock_timeout = '1234ms'").unwrap();
        assert!(one_bool("SELECT advlock_try_with_timeout(5005, 5000)"));
        assert_eq!(one_text("SHOW lock_timeout"), "1234ms");
    }

    #[pg_test]
    fn bad_input_errors() {
        let cases = [
            ("SELECT advlock_try_with_timeout(NULL::bigint, 0)", "22004: argument \"key\" of advlock_try_with_timeout must not be null"),
            ("SELECT advlock_try_with_timeout(1, NULL)", "22004: argument \"timeout_ms\" of advlock_try_with_timeout must not be null"),
            ("SELECT advlock_try_with_timeout(1, 0, NULL)", "22004: argument \"scope\" of advlock_try_with_timeout must not be null"),
            ("SELECT advlock_try_with_timeout(1, 0, 'xact', NULL)", "22004: argument \"mode\" of advlock_try_with_timeout must not be null"),
            ("SELECT advlock_try_with_timeout(NULL, 'x', 0)", "22004: argument \"ns\" of advlock_try_with_timeout must not be null"),
            ("SELECT advlock_try_with_timeout('a', NULL::text, 0)", "22004: argument \"id\" of advlock_try_with_timeout must not be null"),
            ("SELECT advlock_try_with_timeout('a', NULL::bigint, 0)", "22004: argument \"id\" of advlock_try_with_timeout must not be null"),
            ("SELECT advlock_try_with_timeout('', 'x', 0)", "22023: argument \"ns\" of advlock_try_with_timeout must not be empty"),
            ("SELECT advlock_try_with_timeout(1, -1)", "22023: argument \"timeout_ms\" of advlock_try_with_timeout must not be negative: -1"),
            ("SELECT advlock_try_with_timeout(1, 0, 'transaction')", "22023: invalid value for argument \"scope\" of advlock_try_with_timeout: \"transaction\""),
            ("SELECT advlock_try_with_timeout(1, 0, 'xact', 'share')", "22023: invalid value for argument \"mode\" of advlock_try_with_timeout: \"share\""),
            ("SELECT advlock_lock_with_timeout(1, -5)", "22023: argument \"timeout_ms\" of advlock_lock_with_timeout must not be negative: -5"),
            ("SELECT advlock_lock_with_timeout('', 1, 0)", "22023: argument \"ns\" of advlock_lock_with_timeout must not be empty"),
            ("SELECT advlock_unlock(NULL::bigint)", "22004: argument \"key\" of advlock_unlock must not be null"),
            ("SELECT advlock_unlock(1, 'both')", "22023: invalid value for argument \"mode\" of advlock_unlock: \"both\""),
            ("SELECT advlock_unlock('a', NULL::text)", "22004: argument \"id\" of advlock_unlock must not be null"),
        ];
        for (sql, expected) in cases {
            assert_eq!(error_of(sql), expected, "{sql}");
        }
        // Nothing was locked by any of the failed calls.
        assert_eq!(
            one_i64("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"),
            0
        );
    }

    #[pg_test]
    fn functions_are_volatile_parallel_unsafe_and_not_strict() {
        assert_eq!(
            one_i64(
                "SELECT count(*) FROM pg_proc WHERE proname IN
                   ('advlock_try_with_timeout', 'advlock_lock_with_timeout', 'advlock_unlock')
                   AND provolatile = 'v' AND proparallel = 'u' AND NOT proisstrict AND NOT prosecdef"
            ),
            9
        );
    }
}
