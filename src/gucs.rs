//! Settings, all under the `advlock.` prefix (like `pg_stat_statements.*`).
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

/// How long a backend must have been idle while holding an advisory lock before
/// `advlock_holders.is_idle_holder` flags it as a leak. Milliseconds; accepts '30s', '5min'.
pub static IDLE_THRESHOLD_MS: GucSetting<i32> = GucSetting::<i32>::new(60_000);

/// Advisory locks on a hot standby only coordinate sessions on that standby, never with the
/// primary; acquisition refuses there unless this is on.
pub static ALLOW_ON_STANDBY: GucSetting<bool> = GucSetting::<bool>::new(false);

/// A backend idle outside a transaction for longer than this while holding a session-level
/// advisory lock is terminated (src/idle_lock_timeout.rs). Milliseconds; 0 (the default) is off.
pub static IDLE_SESSION_LOCK_TIMEOUT_MS: GucSetting<i32> = GucSetting::<i32>::new(0);

/// Preloaded only: label entries in shared memory (one per backend, key and mode held
/// through an `(ns, id)` form). When full, locks are still taken; advlock_stats_info counts them.
pub static MAX_LABELS: GucSetting<i32> = GucSetting::<i32>::new(4096);

/// Preloaded only: (database, namespace) rows counted in advlock_stats.
pub static MAX_NAMESPACES: GucSetting<i32> = GucSetting::<i32>::new(256);

/// Preloaded only: leases (held and being granted) in shared memory, for all databases.
pub static MAX_LEASES: GucSetting<i32> = GucSetting::<i32>::new(1024);

/// Preloaded only: after a promotion, no lease is granted for this long (ms), so that a lease
/// the old primary granted in WAL this server never received ends first (its holder's renewals
/// fail). 0, the default: nothing is lost at a switchover or with synchronous replication.
pub static LEASE_LOCK_DELAY_MS: GucSetting<i32> = GucSetting::<i32>::new(0);

/// The id of advlock's WAL resource manager unless `advlock.wal_rmgr_id` says otherwise: within
/// the custom range (128-255), not RM_EXPERIMENTAL_ID (128). Not yet checked against, nor
/// reserved on, PostgreSQL's wiki page "CustomWALResourceManagers" (unreachable from where it
/// was chosen): to do before a release; a clash stops the server at start, naming the id.
pub const DEFAULT_RMGR_ID: i32 = 171;

/// Preloaded only: the id of advlock's WAL resource manager (src/preload/lease_wal.rs).
pub static WAL_RMGR_ID: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_RMGR_ID);

/// `preloading`: called from shared_preload_libraries, the only time capacity settings
/// (postmaster context) may be defined.
pub fn init(preloading: bool) {
    GucRegistry::define_int_guc(
        c"advlock.idle_threshold",
        c"Idle time after which a backend holding advisory locks is reported as an idle holder (a likely leak).",
        c"Used by advlock_holders.is_idle_holder, advlock_idle_holders() and advlock_leak_count().",
        &IDLE_THRESHOLD_MS,
        0,
        i32::MAX,
        GucContext::Userset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"advlock.idle_session_lock_timeout",
        c"Terminates a session idle outside a transaction for longer than this while it holds a session-level advisory lock; 0 is off.",
        c"Releases leaked session locks (a pooled connection returned with a lock). Set it to 0 on a connection that holds a lock on purpose while idle (a leader, a migration runner).",
        &IDLE_SESSION_LOCK_TIMEOUT_MS,
        0,
        i32::MAX,
        GucContext::Userset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_bool_guc(
        c"advlock.allow_on_standby",
        c"Allow advlock's acquisition functions on a hot standby.",
        c"Locks taken on a standby coordinate only sessions on that standby, not with the primary.",
        &ALLOW_ON_STANDBY,
        GucContext::Userset,
        GucFlags::default(),
    );
    if preloading {
        GucRegistry::define_int_guc(
            c"advlock.max_labels",
            c"Maximum number of lock labels advlock keeps in shared memory.",
            c"One entry per backend, key and mode taken through an (ns, id) form. When full, locks are still taken without a label and advlock_stats_info.labels_dropped counts them.",
            &MAX_LABELS,
            1,
            1_000_000,
            GucContext::Postmaster,
            GucFlags::default(),
        );
        GucRegistry::define_int_guc(
            c"advlock.max_namespaces",
            c"Maximum number of (database, namespace) rows counted in advlock_stats.",
            c"When full, acquisitions in new namespaces are not counted and advlock_stats_info.stats_dropped counts them.",
            &MAX_NAMESPACES,
            1,
            100_000,
            GucContext::Postmaster,
            GucFlags::default(),
        );
        GucRegistry::define_int_guc(
            c"advlock.max_leases",
            c"Maximum number of leases (advlock_lease) held at once, in all databases.",
            c"When every entry is in use, advlock_lease raises 53200 instead of granting.",
            &MAX_LEASES,
            1,
            1_000_000,
            GucContext::Postmaster,
            GucFlags::default(),
        );
        GucRegistry::define_int_guc(
            c"advlock.lease_lock_delay",
            c"After a standby is promoted, no lease is granted until this much time has passed; 0 is off.",
            c"With asynchronous replication a grant made just before a failover can be lost with the WAL the standby never received; set this to the longest lease TTL in use, so that such a lease's holder sees its renewals fail before anyone else is granted.",
            &LEASE_LOCK_DELAY_MS,
            0,
            i32::MAX,
            GucContext::Sighup,
            GucFlags::UNIT_MS,
        );
        GucRegistry::define_int_guc(
            c"advlock.wal_rmgr_id",
            c"Id of the WAL resource manager advlock logs leases with (129-255).",
            c"Change it only when another extension registers the same id; a standby must use the primary's value.",
            &WAL_RMGR_ID,
            129,
            255,
            GucContext::Postmaster,
            GucFlags::default(),
        );
    }
    // Reserve the prefix so a typo such as advlock.idle_treshold is reported, not kept silently.
    // SAFETY: called once from _PG_init with a static NUL-terminated string.
    unsafe { pgrx::pg_sys::MarkGUCPrefixReserved(c"advlock".as_ptr()) };
}
