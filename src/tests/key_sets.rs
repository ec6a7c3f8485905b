// pg_test functions must live in a module named `tests` (pgrx calls "tests"."name"()).
#[pgrx::pg_schema]
mod tests {
    use crate::tests::{error_of, one_bool, one_i64};
    use pgrx::prelude::*;

    fn my_advisory_locks() -> i64 {
        one_i64(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()",
        )
    }

    #[pg_test]
    fn all_keys_taken_once_each() {
        assert!(one_bool(
            "SELECT advlock_try_all_with_timeout(ARRAY[9, 7, 8, 7], 0)"
        ));
        assert_eq!(my_advisory_locks(), 3, "duplicates collapse");
        assert!(one_bool(
            "SELECT advlock_holding(7) AND advlock_holding(8) AND advlock_holding(9)"
        ));
    }

    #[pg_test]
    fn unlock_all_gives_back_session_holds() {
        assert!(one_bool(
            "SELECT advlock_try_all_with_timeout('t-set', ARRAY['a', 'b'], 0, 'session')"
        ));
        assert!(one_bool(
            "SELECT advlock_unlock_all('t-set', ARRAY['b', 'a'])"
        ));
        assert_eq!(my_advisory_locks(), 0);
    }

    #[pg_test]
    fn bad_arrays_are_named() {
        assert_eq!(
            error_of("SELECT advlock_try_all_with_timeout(ARRAY[]::bigint[], 0)"),
            "22023: argument \"keys\" of advlock_try_all_with_timeout must not be empty"
        );
        assert_eq!(
            error_of("SELECT advlock_lock_all_with_timeout('t', ARRAY[1, NULL]::bigint[], 0)"),
            "22004: element 2 of argument \"ids\" of advlock_lock_all_with_timeout must not be null"
        );
        assert_eq!(my_advisory_locks(), 0);
    }

    #[pg_test]
    fn tokens_grow_and_carry_the_timeline() {
        let t1 = one_i64("SELECT advlock_try_with_token('t-token', 'a', 0, 'xact')");
        let t2 = one_i64("SELECT advlock_try_with_token(424242, 0, 'xact')");
        assert!(t2 > t1);
        assert_eq!(
            t1 >> 47,
            one_i64("SELECT timeline_id::bigint FROM pg_control_checkpoint()")
        );
        assert!(one_bool(
            "SELECT advlock_holding('t-token', 'a') AND advlock_holding(424242)"
        ));
    }
}
