//! The backends' activity as `pg_stat_activity` shows it to the caller, read in Rust from the
//! backend-status snapshot (no SQL, no per-row role lookups): what `advlock_metrics`,
//! `advlock_leak_count` and the lock-timeout DETAIL (who holds the key) need, for every backend
//! of the current database.
use core::ffi::CStr;
use pgrx::pg_sys;
use std::collections::HashMap;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum State {
    /// 'idle': outside any transaction.
    Idle,
    /// 'idle in transaction' (aborted or not).
    IdleInTransaction,
    /// Anything else: running a statement, fast-path call, disabled tracking.
    Other,
}

#[derive(Clone, Debug)]
pub struct Activity {
    pub state: State,
    /// When the backend entered `state` (pg_stat_activity.state_change).
    pub state_since: pg_sys::TimestampTz,
    /// Whether the caller may see this backend's state: pg_read_all_stats, or the privileges
    /// of the backend's role — pg_stat_activity's own rule (HAS_PGSTAT_PERMISSIONS).
    pub visible: bool,
    /// pg_stat_activity.state: None where it shows NULL (not visible, or undefined).
    pub state_name: Option<&'static str>,
    /// pg_stat_activity.application_name, which every caller may see.
    pub application_name: String,
}

/// The client backends of the current database by pid, from the backend-status snapshot (taken
/// once per transaction, as for pg_stat_activity).
pub fn backends_of_my_database() -> HashMap<i32, Activity> {
    let mut out = HashMap::new();
    // SAFETY: the snapshot functions copy the shared backend-status array into backend-local
    // memory (pgstat_read_current_status) and return pointers into that copy, valid until the
    // end of the transaction; we only read fields of those entries within this call.
    unsafe {
        let me = pg_sys::GetUserId();
        let all_stats =
            pg_sys::has_privs_of_role(me, pg_sys::Oid::from(pg_sys::ROLE_PG_READ_ALL_STATS));
        let database = pg_sys::Oid::from(crate::backend::database());
        let mut visible_role: HashMap<pg_sys::Oid, bool> = HashMap::new();
        let n = pg_sys::pgstat_fetch_stat_numbackends();
        for index in 1..=n {
            let local = local_entry(index);
            if local.is_null() {
                continue;
            }
            let status = &(*local).backendStatus;
            if status.st_databaseid != database || status.st_procpid <= 0 {
                continue;
            }
            let visible = all_stats
                || *visible_role
                    .entry(status.st_userid)
                    .or_insert_with(|| pg_sys::has_privs_of_role(me, status.st_userid));
            let state = match status.st_state {
                pg_sys::BackendState::STATE_IDLE => State::Idle,
                pg_sys::BackendState::STATE_IDLEINTRANSACTION
                | pg_sys::BackendState::STATE_IDLEINTRANSACTION_ABORTED => State::IdleInTransaction,
                _ => State::Other,
            };
            let application_name = if status.st_appname.is_null() {
                String::new()
            } else {
                CStr::from_ptr(status.st_appname)
                    .to_string_lossy()
                    .into_owned()
            };
            out.insert(
                status.st_procpid,
                Activity {
                    state,
                    state_since: status.st_state_start_timestamp,
                    visible,
                    state_name: visible.then(|| state_name(status.st_state)).flatten(),
                    application_name,
                },
            );
        }
    }
    out
}

/// pg_stat_activity's word for a backend state (pgstatfuncs.c); None for an undefined one.
fn state_name(state: pg_sys::BackendState::Type) -> Option<&'static str> {
    use pg_sys::BackendState as S;
    Some(match state {
        S::STATE_IDLE => "idle",
        S::STATE_RUNNING => "active",
        S::STATE_IDLEINTRANSACTION => "idle in transaction",
        S::STATE_FASTPATH => "fastpath function call",
        S::STATE_IDLEINTRANSACTION_ABORTED => "idle in transaction (aborted)",
        S::STATE_DISABLED => "disabled",
        _ => return None,
    })
}

/// The `index`th (1-based) entry of the local backend-status snapshot.
#[cfg(feature = "pg15")]
unsafe fn local_entry(index: i32) -> *mut pg_sys::LocalPgBackendStatus {
    // SAFETY: index in 1..=pgstat_fetch_stat_numbackends().
    unsafe { pg_sys::pgstat_fetch_stat_local_beentry(index) }
}

/// The `index`th (1-based) entry of the local backend-status snapshot (renamed in 16).
#[cfg(not(feature = "pg15"))]
unsafe fn local_entry(index: i32) -> *mut pg_sys::LocalPgBackendStatus {
    // SAFETY: index in 1..=pgstat_fetch_stat_numbackends().
    unsafe { pg_sys::pgstat_get_local_beentry_by_index(index) }
}
