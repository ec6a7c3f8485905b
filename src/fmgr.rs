//! The library's hand-written fmgr (version-1) entry points, in one place: the C symbols that
//! SQL declares with `LANGUAGE c AS 'MODULE_PATHNAME', '<symbol>'` beside the concept they serve
//! (pgrx generates every other entry point). Each reads its arguments with [`datum`] or [`arg`],
//! hands them to the module of its concept, and builds its result here. Why they are
//! hand-written:
//! - the three `advlock_key` functions (declared in `keys`): called once per row in scans and
//!   generated columns, where pgrx's generic wrapper cost as much as the hash. The common case
//!   (both arguments present, in-line, non-empty, needing no encoding conversion) is hashed in
//!   place without any guard; everything else goes to a `#[pg_guard]`ed function that runs the
//!   checked code in `keys` and raises there. The symbol names are those pgrx generated for
//!   0.2.0, so databases still at 0.2.0 keep working;
//! - `advlock_holder_entries` (declared in `diagnostics`): a set-returning function in
//!   materialize mode, the rows going straight into the executor's tuplestore (pgrx's
//!   value-per-call iterator cost as much per row as building the row);
//! - the four snapshot-free waits (all four declared in `snapshot_free_wait`): procedures,
//!   which pgrx cannot declare, that commit before they wait;
//! - the three `advlock_fence` functions and the trigger `advlock_fence_update_check` (declared
//!   in `fences`): on every fenced write's path; and what they hand to the PL/pgSQL must raise
//!   from outside pgrx's guard, which turns a SQLSTATE it does not know (LK001) into XX000.
use crate::diagnostics::{self, HOLDER_ENTRY_COLUMNS};
use crate::errors::Report;
use crate::fences;
use crate::keys::{self, advlock_key_bytes};
use crate::lock_request::{timeout, Mode, Scope, Target};
use crate::server_text::{self, ServerText, ServerTextOut};
use crate::snapshot_free_wait::{self, WAIT_CAMPAIGN, WAIT_LEADER, WAIT_LEASE, WAIT_LOCK};
use pgrx::pg_sys;
use pgrx::pg_sys::errcodes::PgSqlErrorCode;
use pgrx::prelude::*;
use pgrx::FromDatum;

/// `pg_finfo_<symbol>` for each symbol: tells the function manager it uses the version-1
/// calling convention.
macro_rules! version_1 {
    ($($finfo:ident),* $(,)?) => {$(
        #[unsafe(no_mangle)]
        pub extern "C" fn $finfo() -> &'static pg_sys::Pg_finfo_record {
            const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
            &V1
        }
    )*};
}

version_1!(
    pg_finfo_advlock_key_text_wrapper,
    pg_finfo_advlock_key_int_wrapper,
    pg_finfo_advlock_key_ns_wrapper,
    pg_finfo_advlock_holder_entries,
    pg_finfo_advlock_wait_lock,
    pg_finfo_advlock_wait_lease,
    pg_finfo_advlock_wait_campaign,
    pg_finfo_advlock_wait_leader,
    pg_finfo_advlock_fence_key,
    pg_finfo_advlock_fence_text,
    pg_finfo_advlock_fence_int,
    pg_finfo_advlock_fence_update_check,
);

/// Argument `n`: its datum, or None when it is SQL NULL.
///
/// # Safety
/// `fcinfo` is the current call's, and its SQL signature has more than `n` arguments.
unsafe fn datum(fcinfo: pg_sys::FunctionCallInfo, n: usize) -> Option<pg_sys::Datum> {
    // SAFETY: see the contract; args has nargs entries.
    unsafe {
        let a = &(*fcinfo).args.as_slice((*fcinfo).nargs as usize)[n];
        (!a.isnull).then_some(a.value)
    }
}

/// Argument `n` as a `T`, or None when it is SQL NULL.
///
/// # Safety
/// As for [`datum`], and argument `n` is of the SQL type `T` reads.
unsafe fn arg<T: FromDatum>(fcinfo: pg_sys::FunctionCallInfo, n: usize) -> Option<T> {
    // SAFETY: see the contract; a non-null datum of T's type, valid for this call.
    unsafe { datum(fcinfo, n).and_then(|d| T::from_datum(d, false)) }
}

// ---- advlock_key ----

/// The bytes of an in-line, uncompressed `text` datum, read in place (what
/// pg_detoast_datum_packed would return, without calling it); None otherwise.
///
/// # Safety
/// `datum` is a non-null `text` datum valid for this call.
unsafe fn in_line_text<'a>(datum: pg_sys::Datum) -> Option<&'a [u8]> {
    use pgrx::varlena::{varatt_is_1b, varatt_is_1b_e, varatt_is_4b_u, varlena_to_byte_slice};
    // SAFETY: see the contract; only the header is inspected before the payload is sliced.
    unsafe {
        let raw = datum.cast_mut_ptr::<pg_sys::varlena>();
        let in_place = (varatt_is_1b(raw) && !varatt_is_1b_e(raw)) || varatt_is_4b_u(raw);
        in_place.then(|| varlena_to_byte_slice(raw))
    }
}

/// A namespace or id that hashes as is: its bytes are already the UTF-8 the key spec hashes.
fn hashable_as_is(bytes: &[u8]) -> bool {
    bytes.is_ascii() || !server_text::needs_conversion()
}

/// A namespace hashed in place: present, in-line, non-empty, needing no conversion.
///
/// # Safety
/// `datum` is a `text` datum (or NULL) valid for this call.
unsafe fn fast_namespace<'a>(datum: Option<pg_sys::Datum>) -> Option<&'a [u8]> {
    // SAFETY: see the contract.
    let ns = unsafe { in_line_text(datum?) }?;
    (!ns.is_empty() && hashable_as_is(ns)).then_some(ns)
}

/// `advlock_key(ns text, id text) → bigint`.
///
/// # Safety
/// Called by the function manager with a 2-argument `(text, text)` call.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn advlock_key_text_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: the SQL signature is (text, text); non-null datums are valid text for this call.
    unsafe {
        if let (Some(ns), Some(id)) = (fast_namespace(datum(fcinfo, 0)), datum(fcinfo, 1)) {
            if let Some(id) = in_line_text(id).filter(|id| hashable_as_is(id)) {
                return pg_sys::Datum::from(advlock_key_bytes(ns, id));
            }
        }
        checked_key_text(fcinfo)
    }
}

/// `advlock_key(ns text, id bigint) → bigint`.
///
/// # Safety
/// Called by the function manager with a 2-argument `(text, bigint)` call.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn advlock_key_int_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: the SQL signature is (text, bigint); bigint is passed by value on 64-bit servers.
    unsafe {
        if let (Some(ns), Some(id)) = (fast_namespace(datum(fcinfo, 0)), datum(fcinfo, 1)) {
            let mut digits = [0u8; 20];
            let id = keys::decimal(id.value() as i64, &mut digits);
            return pg_sys::Datum::from(advlock_key_bytes(ns, id));
        }
        checked_key_int(fcinfo)
    }
}

/// `advlock_key(ns text) → bigint`.
///
/// # Safety
/// Called by the function manager with a 1-argument `(text)` call.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn advlock_key_ns_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: the SQL signature is (text).
    unsafe {
        if let Some(ns) = fast_namespace(datum(fcinfo, 0)) {
            return pg_sys::Datum::from(advlock_key_bytes(ns, b""));
        }
        checked_key_ns(fcinfo)
    }
}

// The checked paths: detoasting, conversion and errors happen under pgrx's guard.

#[pg_guard]
unsafe extern "C-unwind" fn checked_key_text(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: as in advlock_key_text_wrapper.
    let key = unsafe { keys::advlock_key_text(arg(fcinfo, 0), arg(fcinfo, 1)) };
    pg_sys::Datum::from(key)
}

#[pg_guard]
unsafe extern "C-unwind" fn checked_key_int(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: as in advlock_key_int_wrapper.
    let key = unsafe { keys::advlock_key_int(arg(fcinfo, 0), arg(fcinfo, 1)) };
    pg_sys::Datum::from(key)
}

#[pg_guard]
unsafe extern "C-unwind" fn checked_key_ns(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: as in advlock_key_ns_wrapper.
    let key = unsafe { keys::advlock_key_ns(arg::<ServerText>(fcinfo, 0)) };
    pg_sys::Datum::from(key)
}

// ---- advlock_fence and the guard of advlock_fences ----
// Not under pgrx's guard themselves: `fences` runs its checks under the guard and then calls the
// PL/pgSQL that raises from these frames, so that its SQLSTATE (LK001) reaches PostgreSQL as is.

/// `advlock_fence(key bigint, token bigint) → void`.
///
/// # Safety
/// Called by the function manager, as declared in `fences`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn advlock_fence_key(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: fcinfo is this call's, of the (key bigint, token bigint) form.
    unsafe { fences::fence(fcinfo, fences::Form::Key) }
}

/// `advlock_fence(ns text, id text, token bigint) → void`.
///
/// # Safety
/// Called by the function manager, as declared in `fences`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn advlock_fence_text(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: fcinfo is this call's, of the (ns text, id text, token bigint) form.
    unsafe { fences::fence(fcinfo, fences::Form::Text) }
}

/// `advlock_fence(ns text, id bigint, token bigint) → void`.
///
/// # Safety
/// Called by the function manager, as declared in `fences`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn advlock_fence_int(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: fcinfo is this call's, of the (ns text, id bigint, token bigint) form.
    unsafe { fences::fence(fcinfo, fences::Form::Int) }
}

/// `advlock_fence_update_check() → trigger`, the BEFORE UPDATE row trigger of advlock_fences.
///
/// # Safety
/// Called by the function manager, as declared in `fences`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn advlock_fence_update_check(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: fcinfo is this call's; update_check checks its context before reading it.
    unsafe { fences::update_check(fcinfo) }
}

// ---- advlock_holder_entries ----

/// `advlock_holder_entries(pids int4[] DEFAULT NULL)`: the rows of `diagnostics::holder_rows`,
/// put into the tuplestore the executor reads.
///
/// # Safety
/// Called by the function manager, as declared in `diagnostics`.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn advlock_holder_entries(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: fcinfo is this call's; the SQL signature is (pids int4[]).
    let pids: Option<Vec<Option<i32>>> = unsafe { arg(fcinfo, 0) };
    let rows = diagnostics::holder_rows(pids.as_deref());
    // SAFETY: called as a set-returning function in a FROM clause (the only way the SQL allows),
    // so resultinfo is a ReturnSetInfo; InitMaterializedSRF raises otherwise. It builds the
    // tuplestore and the tuple descriptor from the declared result columns, which number
    // HOLDER_ENTRY_COLUMNS; each row's datums are built in the current (per-query) memory
    // context and copied by tuplestore_putvalues.
    unsafe {
        pg_sys::InitMaterializedSRF(fcinfo, 0);
        let rsinfo = (*fcinfo).resultinfo as *mut pg_sys::ReturnSetInfo;
        let (store, desc) = ((*rsinfo).setResult, (*rsinfo).setDesc);
        for row in rows {
            let columns: [Option<pg_sys::Datum>; HOLDER_ENTRY_COLUMNS] = row.into_datums();
            let mut nulls = columns.map(|c| c.is_none());
            let mut values = columns.map(|c| c.unwrap_or(pg_sys::Datum::from(0)));
            pg_sys::tuplestore_putvalues(store, desc, values.as_mut_ptr(), nulls.as_mut_ptr());
        }
    }
    pg_sys::Datum::from(0)
}

// ---- the snapshot-free waits ----

/// Whether this `CALL` runs in a non-atomic context (outside a transaction block), where a
/// procedure may commit.
///
/// # Safety
/// `fcinfo` is the current call's.
unsafe fn nonatomic(fcinfo: pg_sys::FunctionCallInfo) -> bool {
    // SAFETY: reading the call context node of this call.
    unsafe {
        let context = (*fcinfo).context;
        !context.is_null()
            && pgrx::is_a(context, pg_sys::NodeTag::T_CallContext)
            && !(*(context as *mut pg_sys::CallContext)).atomic
    }
}

/// The record a procedure's `CALL` returns: its INOUT parameters, in order (`N` of them), each a
/// datum of its type or None for NULL.
///
/// # Safety
/// `fcinfo` is this call's, of a procedure with `N` INOUT parameters; SPI is finished (the
/// current memory context is the caller's again), and by-reference `values` were built in it.
unsafe fn procedure_result<const N: usize>(
    fcinfo: pg_sys::FunctionCallInfo,
    values: [Option<pg_sys::Datum>; N],
) -> pg_sys::Datum {
    // SAFETY: get_call_result_type builds the row type from the procedure's output parameters;
    // the tuple is formed in the current memory context, the caller's.
    unsafe {
        let mut tupdesc: pg_sys::TupleDesc = core::ptr::null_mut();
        let class = pg_sys::get_call_result_type(fcinfo, core::ptr::null_mut(), &mut tupdesc);
        if class != pg_sys::TypeFuncClass::TYPEFUNC_COMPOSITE || (*tupdesc).natts as usize != N {
            Report::new(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                format!("advlock: procedure result type is not a row of {N} columns"),
            )
            .raise();
        }
        let tupdesc = pg_sys::BlessTupleDesc(tupdesc);
        let mut nulls = values.map(|v| v.is_none());
        let mut values = values.map(|v| v.unwrap_or(pg_sys::Datum::from(0)));
        let tuple = pg_sys::heap_form_tuple(tupdesc, values.as_mut_ptr(), nulls.as_mut_ptr());
        pg_sys::HeapTupleHeaderGetDatum((*tuple).t_data)
    }
}

/// `CALL advlock_wait_lock(key, timeout_ms, mode, acquired => NULL)`: a session lock, waited for
/// with no snapshot held; `acquired` says whether it was granted.
///
/// # Safety
/// Called by the function manager, as declared in `snapshot_free_wait`.
#[unsafe(no_mangle)]
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
        snapshot_free_wait::commit_first(nonatomic(fcinfo), WAIT_LOCK);
        let acquired =
            crate::acquisition::acquire_one(WAIT_LOCK, &target, timeout_ms, Scope::Session, mode);
        snapshot_free_wait::finish();
        procedure_result(fcinfo, [Some(pg_sys::Datum::from(acquired))])
    }
}

/// `CALL advlock_wait_lease(key, ttl_ms, timeout_ms, slots, lease => NULL)`: a lease, waited for
/// with no snapshot held; `lease` is its id, or NULL when the wait ran out.
///
/// # Safety
/// Called by the function manager, as declared in `snapshot_free_wait`.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn advlock_wait_lease(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: fcinfo is this call's; argument 3 is `slots integer`.
    unsafe {
        wait_take(
            fcinfo,
            WAIT_LEASE,
            crate::leases::take,
            |ttl_ms, timeout_ms| {
                let slots = arg::<i32>(fcinfo, 3);
                crate::leases::check_lease_arguments(WAIT_LEASE, ttl_ms, timeout_ms, slots)
            },
        )
    }
}

/// `CALL advlock_wait_campaign(key, ttl_ms, timeout_ms, candidate, term => NULL)`: a campaign,
/// waited for with no snapshot held; `term` is the term won, or NULL when the wait ran out.
///
/// # Safety
/// Called by the function manager, as declared in `snapshot_free_wait`.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn advlock_wait_campaign(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: fcinfo is this call's; argument 3 is `candidate text`, copied by the check.
    unsafe {
        wait_take(
            fcinfo,
            WAIT_CAMPAIGN,
            crate::election::take_term,
            |ttl_ms, timeout_ms| {
                let candidate = arg::<ServerText>(fcinfo, 3);
                crate::election::check_campaign_arguments(
                    WAIT_CAMPAIGN,
                    ttl_ms,
                    timeout_ms,
                    candidate,
                )
            },
        )
    }
}

/// The two snapshot-free takers of the lease table (a lease, a term): `(key, ttl_ms, timeout_ms,
/// …)` read and checked (`check` reads the fourth argument) before the commit, then the wait,
/// and one INOUT bigint: the lease id or term taken, NULL when the wait ran out.
///
/// # Safety
/// `fcinfo` is the current call's, of a procedure declared `(key bigint, ttl_ms integer,
/// timeout_ms integer, …, INOUT … bigint)`.
unsafe fn wait_take(
    fcinfo: pg_sys::FunctionCallInfo,
    function: &str,
    take: fn(&str, Target, crate::leases::LeaseArgs, pg_sys::FunctionCallInfo) -> Option<i64>,
    check: impl FnOnce(Option<i32>, Option<i32>) -> crate::leases::LeaseArgs,
) -> pg_sys::Datum {
    // SAFETY: see the contract; the arguments are read before the commit.
    unsafe {
        let key = arg::<i64>(fcinfo, 0);
        let ttl_ms = arg::<i32>(fcinfo, 1);
        let timeout_ms = arg::<i32>(fcinfo, 2);
        let target = Target::from_key(key, function);
        let args = check(ttl_ms, timeout_ms);
        snapshot_free_wait::commit_first(nonatomic(fcinfo), function);
        let taken = take(function, target, args, fcinfo);
        snapshot_free_wait::finish();
        procedure_result(fcinfo, [taken.map(pg_sys::Datum::from)])
    }
}

/// `CALL advlock_wait_leader(key, timeout_ms, known_term, term => NULL, changed => NULL,
/// candidate => NULL)`: `advlock_observe_leader` with no snapshot held; `term` and `candidate`
/// are the leader's after the wait (NULL: none), `changed` whether it differs from known_term.
///
/// # Safety
/// Called by the function manager, as declared in `snapshot_free_wait`.
#[unsafe(no_mangle)]
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
        snapshot_free_wait::commit_first(nonatomic(fcinfo), WAIT_LEADER);
        let observed = crate::election::observe(target.key, timeout_ms, known);
        // After SPI_finish: a text datum built in SPI's procedure context would be freed with it.
        snapshot_free_wait::finish();
        let candidate = observed
            .candidate()
            .and_then(|c| ServerTextOut(c).into_datum());
        procedure_result(
            fcinfo,
            [
                observed.term().map(pg_sys::Datum::from),
                Some(pg_sys::Datum::from(observed.changed)),
                candidate,
            ],
        )
    }
}
