// pg_test functions must live in a module named `tests` (pgrx calls "tests"."name"()).
#[pgrx::pg_schema]
mod tests {
    use crate::tests::{error_of, one_bool, one_i64, one_text};
    use pgrx::prelude::*;

    /// The one conflict rule is the lock manager's own table: the two advisory modes conflict
    /// unless both are shared, and any other mode a hold on an advisory tag could have is
    /// judged the way lock.c judges it (ShareLock against RowExclusiveLock: conflict; against
    /// AccessShareLock: none).
    #[pg_test]
    fn entry_modes_conflict_as_the_lock_manager_says() {
        use crate::lock_mode::Mode;
        use crate::lockmgr::EntryMode;
        let (x, s) = (EntryMode::of(Mode::Exclusive), EntryMode::of(Mode::Shared));
        assert!(x.conflicts(x) && x.conflicts(s) && s.conflicts(x));
        assert!(!s.conflicts(s));
        assert_eq!(
            (x.advlock(), s.advlock()),
            (Some(Mode::Exclusive), Some(Mode::Shared))
        );
        assert_eq!((x.name(), s.name()), ("exclusive", "shared"));
        let row_exclusive = EntryMode::raw(pgrx::pg_sys::RowExclusiveLock as i32);
        let access_share = EntryMode::raw(pgrx::pg_sys::AccessShareLock as i32);
        assert!(s.conflicts(row_exclusive) && row_exclusive.conflicts(s));
        assert!(!s.conflicts(access_share) && !x.conflicts(access_share));
        assert_eq!(row_exclusive.advlock(), None);
        assert_eq!(row_exclusive.name(), "RowExclusiveLock");
    }

    #[pg_test]
    fn holders_decode_int8_keys_including_negative() {
        for key in [
            0i64,
            1,
            -1,
            42,
            -42,
            i64::MAX,
            i64::MIN,
            2132624222628149741,
            -4880605526533726798,
        ] {
            Spi::run(&format!("SELECT pg_advisory_xact_lock('{key}'::bigint)")).unwrap();
            assert!(
                one_bool(&format!("SELECT EXISTS (SELECT FROM advlock_holders WHERE key = '{key}'::bigint AND granted AND pid = pg_backend_pid() AND key1 IS NULL)")),
                "key {key} decodes"
            );
        }
    }

    #[pg_test]
    fn holder_entries_refuse_a_null_pid() {
        assert_eq!(
            error_of("SELECT * FROM advlock_holder_entries(ARRAY[NULL]::int[])"),
            "22004: argument \"pids\" of advlock_holder_entries must not contain NULL"
        );
        Spi::run("SELECT pg_advisory_xact_lock(12)").unwrap();
        assert_eq!(
            one_i64("SELECT count(*) FROM advlock_holder_entries(ARRAY[pg_backend_pid()]) WHERE key = 12"),
            1
        );
        assert_eq!(
            one_i64("SELECT count(*) FROM advlock_holder_entries('{}') WHERE key = 12"),
            0
        );
    }

    #[pg_test]
    fn holders_decode_two_int4_keys() {
        Spi::run("SELECT pg_advisory_xact_lock(-5, 2147483647)").unwrap();
        assert_eq!(
            one_text("SELECT format('%s/%s/%s/%s', key1, key2, coalesce(key::text, 'null'), mode) FROM advlock_holders WHERE pid = pg_backend_pid()"),
            "-5/2147483647/null/exclusive"
        );
    }

    #[pg_test]
    fn holders_show_backend_columns() {
        Spi::run("SELECT pg_advisory_xact_lock_shared(11)").unwrap();
        assert_eq!(
            one_text(
                "SELECT format('%s|%s|%s|%s|%s|%s', mode, granted, backend_state, idle_for IS NULL,
                               is_idle_holder, blocked_by IS NULL AND waiting_since IS NULL AND label IS NULL)
                   FROM advlock_holders WHERE key = 11"
            ),
            "shared|t|active|t|f|t"
        );
    }

    #[pg_test]
    fn idle_threshold_guc_and_helper() {
        assert_eq!(one_text("SHOW advlock.idle_threshold"), "1min");
        assert_eq!(
            one_text("SELECT advlock_idle_threshold()::text"),
            "00:01:00"
        );
        Spi::run("SET LOCAL advlock.idle_threshold = '250ms'").unwrap();
        assert_eq!(
            one_text("SELECT advlock_idle_threshold()::text"),
            "00:00:00.25"
        );
        assert_eq!(
            one_text("SELECT advlock_idle_threshold('2 hours')::text"),
            "02:00:00"
        );
        assert_eq!(
            error_of("SELECT advlock_idle_threshold('-1 second')"),
            "22023: argument \"older_than\" of advlock_idle_threshold must not be a negative interval"
        );
        assert_eq!(one_i64("SELECT advlock_leak_count()"), 0);
        // Other tests run in parallel backends that may be idle, holding a session lock, for a
        // moment: only this (running) backend is certain not to be an idle holder.
        assert_eq!(
            one_i64("SELECT count(*) FROM advlock_idle_holders('0') WHERE pid = pg_backend_pid()"),
            0
        );
    }

    #[pg_test]
    fn terminate_rejects_null_and_negative() {
        assert_eq!(
            error_of("SELECT * FROM advlock_terminate_idle_holders(NULL)"),
            "22004: argument \"older_than\" of advlock_terminate_idle_holders must not be null"
        );
        assert_eq!(
            error_of("SELECT * FROM advlock_terminate_idle_holders('-5 min')"),
            "22023: argument \"older_than\" of advlock_terminate_idle_holders must not be a negative interval"
        );
        assert_eq!(
            error_of("SELECT * FROM advlock_terminate_idle_holders('5 min', NULL)"),
            "22004: argument \"dry_run\" of advlock_terminate_idle_holders must not be null"
        );
        // Other tests run in parallel backends that may be idle holding a session lock for a
        // moment (seen once: 1 row): only this running backend is certain not to be listed.
        assert_eq!(
            one_i64(
                "SELECT count(*) FROM advlock_terminate_idle_holders('0', dry_run => true) WHERE pid = pg_backend_pid()"
            ),
            0
        );
    }
}
