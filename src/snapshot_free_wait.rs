//! Waits that hold no snapshot: `CALL advlock_wait_lock(…)`, `CALL advlock_wait_lease(…)`, and for
//! leader election `CALL advlock_wait_campaign(…)` and `CALL advlock_wait_leader(…)` (a follower
//! observes for minutes: a snapshot held that long would also hold back VACUUM's horizon).
//!
//! A backend waiting for a lock inside a statement holds that statement's snapshot, and
//! `CREATE INDEX CONCURRENTLY` waits for every backend whose snapshot is older than its own
//! (`WaitForOlderSnapshots`, which skips only backends with no xmin). So when the holder of an
//! advisory lock builds an index concurrently — the migration that pods wait for — CIC waits for
//! the waiters, the waiters wait for the holder: the deadlock detector kills one (40P01), or, for
//! a lease waiter that the lock manager cannot see, CIC stalls for the waiter's whole timeout.
//! Even a waiter with no statement snapshot keeps the catalog snapshot of its name lookups.
//!
//! A procedure called with `CALL` outside a transaction block runs in a non-atomic context and
//! may commit. These two commit first (`SPI_commit`: the caller's transaction ends, the portal's
//! snapshots are forgotten and the catalog snapshot is invalidated), so the wait that follows runs
//! in a fresh transaction with no snapshot at all, and CIC does not wait for it. Everything they
//! need after the commit — the key, the arguments — was evaluated by `CALL` before. Inside a
//! transaction block (an atomic context) they cannot commit and refuse with 25001.
use crate::errors::Report;
use crate::lock_request::{timeout, Mode, Scope, Target};
use crate::server_text::ServerText;
use pgrx::pg_sys;
use pgrx::pg_sys::errcodes::PgSqlErrorCode;
use pgrx::prelude::*;

const WAIT_LOCK: &str = "advlock_wait_lock";
const WAIT_LEASE: &str = "advlock_wait_lease";
const WAIT_CAMPAIGN: &str = "advlock_wait_campaign";
const WAIT_LEADER: &str = "advlock_wait_leader";

/// # Safety
/// `fcinfo` is this call's.
unsafe fn arg<T: FromDatum>(fcinfo: pg_sys::FunctionCallInfo, n: usize) -> Option<T> {
    // SAFETY: argument n exists (the procedure's signature is fixed in the SQL below).
    unsafe { pgrx::pg_getarg::<T>(fcinfo, n) }
}

/// Ends the caller's transaction so that nothing of it (snapshots included) is held while
/// waiting, or raises 25001 where `CALL` runs atomically (inside a transaction block).
/// Returns with SPI connected; `finish` disconnects.
///
/// # Safety
/// `fcinfo` is this call's.
unsafe fn commit_first(fcinfo: pg_sys::FunctionCallInfo, function: &str) {
    // SAFETY: reading the call context node of this call.
    let nonatomic = unsafe {
        let context = (*fcinfo).context;
        !context.is_null()
            && pgrx::is_a(context, pg_sys::NodeTag::T_CallContext)
            && !(*(context as *mut pg_sys::CallContext)).atomic
    };
    if !nonatomic {
        Report::new(
            PgSqlErrorCode::ERRCODE_ACTIVE_SQL_TRANSACTION,
            format!("{function} must be called with CALL outside a transaction block"),
        )
        .detail("It commits before waiting, so that the wait holds no snapshot (CREATE INDEX CONCURRENTLY waits for snapshots).")
        .hint("Run CALL on its own (autocommit); inside a transaction use the functions, which wait with the transaction's snapshot.")
        .raise();
    }
    // SAFETY: a non-atomic procedure context, as SPI_commit requires; SPI errors raise.
    unsafe {
        pg_sys::SPI_connect_ext(pg_sys::SPI_OPT_NONATOMIC as i32);
        pg_sys::SPI_commit();
    }
}

/// The procedure's INOUT parameters, in order, as the record `CALL` returns.
///
/// # Safety
/// `fcinfo` is this call's; SPI is connected (`commit_first`); `values` has one entry per INOUT
/// parameter, each a datum of its type (or None for NULL).
unsafe fn finish(
    fcinfo: pg_sys::FunctionCallInfo,
    values: &[Option<pg_sys::Datum>],
) -> pg_sys::Datum {
    // SAFETY: SPI_finish returns to the caller's memory context, where the result tuple must
    // live; get_call_result_type builds the row type from the procedure's output parameters.
    unsafe {
        pg_sys::SPI_finish();
        let mut tupdesc: pg_sys::TupleDesc = core::ptr::null_mut();
        let class = pg_sys::get_call_result_type(fcinfo, core::ptr::null_mut(), &mut tupdesc);
        if class != pg_sys::TypeFuncClass::TYPEFUNC_COMPOSITE {
            Report::new(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                "advlock: procedure result type is not a row",
            )
            .raise();
        }
        let tupdesc = pg_sys::BlessTupleDesc(tupdesc);
        let mut nulls: Vec<bool> = values.iter().map(Option::is_none).collect();
        let mut values: Vec<pg_sys::Datum> = values
            .iter()
            .map(|v| v.unwrap_or(pg_sys::Datum::from(0)))
            .collect();
        let tuple = pg_sys::heap_form_tuple(tupdesc, values.as_mut_ptr(), nulls.as_mut_ptr());
        pg_sys::HeapTupleHeaderGetDatum((*tuple).t_data)
    }
}

/// `CALL advlock_wait_lock(key, timeout_ms, mode, acquired => NULL)`: a session lock, waited for
/// with no snapshot held; `acquired` says whether it was granted.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn advlock_wait_lock(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: fcinfo is this call's; the arguments are read before the commit.
    unsafe {
        let key = arg::<i64>(fcinfo, 0);
        let timeout_ms = timeout(arg::<i32>(fcinfo, 1), WAIT_LOCK);
        let mode = Mode::parse(arg::<ServerText>(fcinfo, 2), WAIT_LOCK);
        let target = Target::from_key(key, WAIT_LOCK);
        commit_first(fcinfo, WAIT_LOCK);
        let acquired =
            crate::acquisition::acquire(WAIT_LOCK, &target, timeout_ms, Scope::Session, mode);
        finish(fcinfo, &[Some(pg_sys::Datum::from(acquired))])
    }
}

/// `CALL advlock_wait_lease(key, ttl_ms, timeout_ms, slots, lease => NULL)`: a lease, waited for
/// with no snapshot held; `lease` is its id, or NULL when the wait ran out.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn advlock_wait_lease(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: fcinfo is this call's; the arguments are read before the commit.
    unsafe {
        let key = arg::<i64>(fcinfo, 0);
        let ttl_ms = arg::<i32>(fcinfo, 1);
        let timeout_ms = arg::<i32>(fcinfo, 2);
        let slots = arg::<i32>(fcinfo, 3);
        let target = Target::from_key(key, WAIT_LEASE);
        let args = crate::leases::check_lease_arguments(WAIT_LEASE, ttl_ms, timeout_ms, slots);
        commit_first(fcinfo, WAIT_LEASE);
        let lease = crate::leases::take(WAIT_LEASE, target, args, fcinfo);
        finish(fcinfo, &[lease.map(pg_sys::Datum::from)])
    }
}

/// `CALL advlock_wait_campaign(key, ttl_ms, timeout_ms, candidate, term => NULL)`: a campaign,
/// waited for with no snapshot held; `term` is the term won, or NULL when the wait ran out.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn advlock_wait_campaign(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: fcinfo is this call's; the arguments are read (and the candidate copied) before
    // the commit.
    unsafe {
        let key = arg::<i64>(fcinfo, 0);
        let ttl_ms = arg::<i32>(fcinfo, 1);
        let timeout_ms = arg::<i32>(fcinfo, 2);
        let candidate = arg::<ServerText>(fcinfo, 3);
        let target = Target::from_key(key, WAIT_CAMPAIGN);
        let args =
            crate::election::check_campaign_arguments(WAIT_CAMPAIGN, ttl_ms, timeout_ms, candidate);
        commit_first(fcinfo, WAIT_CAMPAIGN);
        let term = crate::leases::take(WAIT_CAMPAIGN, target, args, fcinfo);
        finish(fcinfo, &[term.map(pg_sys::Datum::from)])
    }
}

/// `CALL advlock_wait_leader(key, timeout_ms, known_term, term => NULL, changed => NULL,
/// candidate => NULL)`: `advlock_observe_leader` with no snapshot held; `term` and `candidate`
/// are the leader's after the wait (NULL: none), `changed` whether it differs from known_term.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn advlock_wait_leader(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: fcinfo is this call's; the arguments are read before the commit.
    unsafe {
        let key = arg::<i64>(fcinfo, 0);
        let timeout_ms = timeout(arg::<i32>(fcinfo, 1), WAIT_LEADER);
        let known = arg::<i64>(fcinfo, 2);
        let target = Target::from_key(key, WAIT_LEADER);
        crate::leases::require_leases(WAIT_LEADER);
        commit_first(fcinfo, WAIT_LEADER);
        let observed = crate::election::observe(target.key, timeout_ms, known);
        let candidate = observed
            .candidate()
            .and_then(|c| crate::server_text::ServerTextOut(c).into_datum());
        finish(
            fcinfo,
            &[
                observed.term().map(pg_sys::Datum::from),
                Some(pg_sys::Datum::from(observed.changed)),
                candidate,
            ],
        )
    }
}

#[no_mangle]
pub extern "C" fn pg_finfo_advlock_wait_lock() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

#[no_mangle]
pub extern "C" fn pg_finfo_advlock_wait_lease() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

#[no_mangle]
pub extern "C" fn pg_finfo_advlock_wait_campaign() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

#[no_mangle]
pub extern "C" fn pg_finfo_advlock_wait_leader() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

pgrx::extension_sql!(
    r#"
-- Waits that hold no snapshot (src/snapshot_free_wait.rs): procedures, so that they can commit
-- before waiting. C functions of the library, declared here (pgrx declares functions only).
CREATE PROCEDURE @extschema@.advlock_wait_lock(
    key bigint, timeout_ms integer, mode text DEFAULT 'exclusive', INOUT acquired boolean DEFAULT NULL)
  LANGUAGE c AS 'MODULE_PATHNAME', 'advlock_wait_lock';
CREATE PROCEDURE @extschema@.advlock_wait_lease(
    key bigint, ttl_ms integer, timeout_ms integer, slots integer DEFAULT 1, INOUT lease bigint DEFAULT NULL)
  LANGUAGE c AS 'MODULE_PATHNAME', 'advlock_wait_lease';
"#,
    name = "snapshot_free_wait",
);

pgrx::extension_sql!(
    r#"
-- Leader election's snapshot-free waits (src/election.rs), C functions declared like the above.
CREATE PROCEDURE @extschema@.advlock_wait_campaign(
    key bigint, ttl_ms integer, timeout_ms integer, candidate text, INOUT term bigint DEFAULT NULL)
  LANGUAGE c AS 'MODULE_PATHNAME', 'advlock_wait_campaign';
CREATE PROCEDURE @extschema@.advlock_wait_leader(
    key bigint, timeout_ms integer, known_term bigint DEFAULT NULL,
    INOUT term bigint DEFAULT NULL, INOUT changed boolean DEFAULT NULL, INOUT candidate text DEFAULT NULL)
  LANGUAGE c AS 'MODULE_PATHNAME', 'advlock_wait_leader';
"#,
    name = "election_waits",
    requires = ["snapshot_free_wait"],
);
