//! The lease wait's name (src/wait_events.rs) on every major: what a waiting backend would put in
//! pg_stat_activity. That a waiting session shows it is tested between real sessions in
//! pg_test/leases/test_wait_events.py (PostgreSQL 17 in the test command).
#[pgrx::pg_schema]
mod tests {
    use pgrx::pg_sys;
    use pgrx::prelude::*;

    #[cfg(any(feature = "pg17", feature = "pg18"))]
    #[pg_test]
    fn the_lease_wait_is_named_advlock_lease_wait() {
        const CLASS: u32 = 0xFF00_0000; // wait_event.c's WAIT_EVENT_CLASS_MASK
        let id = crate::wait_events::lease_wait();
        assert_eq!(
            id & CLASS,
            pg_sys::PG_WAIT_EXTENSION,
            "an Extension-class wait"
        );
        assert_ne!(
            id,
            pg_sys::PG_WAIT_EXTENSION,
            "not the generic 'Extension' event"
        );
        assert_eq!(crate::wait_events::lease_wait(), id, "one id per name");
        let listed = Spi::get_one::<i64>(
            "SELECT count(*) FROM pg_wait_events WHERE type = 'Extension' AND name = 'AdvlockLeaseWait'",
        )
        .unwrap();
        assert_eq!(listed, Some(1));
    }

    #[cfg(any(feature = "pg15", feature = "pg16"))]
    #[pg_test]
    fn the_lease_wait_is_the_generic_extension_wait() {
        assert_eq!(crate::wait_events::lease_wait(), pg_sys::PG_WAIT_EXTENSION);
    }
}
