//! Leases: locks owned by a token instead of a backend. `advlock_lease` takes one in any
//! transaction on any connection and returns its id, which is also its fencing token (the same
//! source as `advlock_try_with_token`); `advlock_lease_renew` and `advlock_lease_release` work
//! from any connection of the same database, after the acquiring backend is gone too (a pooled
//! connection, PgBouncer in transaction mode). A lease not renewed within its TTL ends, and the
//! oldest waiter gets the key at that moment (it sleeps until the expiry, nobody polls).
//!
//! `slots => N` makes the key a counting semaphore: up to N leases at once, with one N per key
//! (a different N while the key is in use is an error). Waiters are served first come, first
//! served, across slots.
//!
//! Leases live in their own key space: a lease on key 42 does not conflict with
//! `pg_advisory_lock(42)`. PostgreSQL's lock manager ties every lock to the process that holds it
//! and cannot hand a held lock to another process, nor wait for "any one of N" locks, so leases
//! are kept in advlock's shared memory (`preload::leases`) and need the library preloaded, like
//! pg_stat_statements. Leases are logged in the WAL (`preload::lease_wal`): a crash, a restart
//! and the promotion of a standby keep them, each live again until at least its TTL after the
//! server came back.
//!
//! Who may renew or release: the lease's role and its members (`has_privs_of_role`), as for
//! `pg_cancel_backend`. A lease id alone does not let another role end it.
use crate::backend;
use crate::errors::{invalid_argument, required, Report};
use crate::fencing;
use crate::lock_request::{key_forms, timeout, Target};
use crate::lockmgr;
use crate::preload::labels::{self, LABEL_BYTES};
use crate::preload::lease_wal;
use crate::preload::leases::{self as table, Ended, Grant, Renewal};
use crate::preload::shmem;
use crate::server_text::{ServerText, ServerTextOut};
use pgrx::pg_sys;
use pgrx::pg_sys::errcodes::PgSqlErrorCode;
use pgrx::prelude::*;
use pgrx::PgTryBuilder;
use std::cell::Cell;

const LEASE: &str = "advlock_lease";
const RENEW: &str = "advlock_lease_renew";
const RELEASE: &str = "advlock_lease_release";

#[track_caller]
fn ttl(value: Option<i32>, function: &str) -> i32 {
    let ms = required(value, function, "ttl_ms");
    if ms <= 0 {
        invalid_argument(
            format!("argument \"ttl_ms\" of {function} must be positive: {ms}"),
            "A lease lasts ttl_ms milliseconds from its grant or last renewal; renew it well before that (e.g. every ttl_ms / 3).",
        );
    }
    ms
}

#[track_caller]
fn slot_count(value: Option<i32>, function: &str) -> u32 {
    let n = required(value, function, "slots");
    if n < 1 {
        invalid_argument(
            format!("argument \"slots\" of {function} must be at least 1: {n}"),
            "slots => 1 (the default) is a lock; slots => N lets up to N leases hold the key at once.",
        );
    }
    n as u32
}

fn application_name() -> Vec<u8> {
    // SAFETY: the application_name GUC's C string, NUL-terminated, valid while no SET runs.
    unsafe {
        let name = pg_sys::application_name;
        if name.is_null() {
            Vec::new()
        } else {
            core::ffi::CStr::from_ptr(name).to_bytes().to_vec()
        }
    }
}

thread_local! {
    static EXIT_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

/// A backend that exits (or is terminated) while waiting leaves no waiter entry behind.
pub(crate) fn register_exit_callback() {
    if !EXIT_CALLBACK.get() {
        // SAFETY: registers a static callback once per backend; it runs in this process at exit.
        unsafe { pg_sys::before_shmem_exit(Some(forget_me_at_exit), pg_sys::Datum::from(0)) };
        EXIT_CALLBACK.set(true);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn forget_me_at_exit(_code: i32, _arg: pg_sys::Datum) {
    forget_me();
}

/// Gives up this backend's wait and any lease reserved for it but not confirmed, and lets the
/// next waiters of those keys have them.
fn forget_me() {
    let pid = table::me().pid;
    table::with_table(true, |t| {
        let now = backend::now();
        for (database, key) in t.forget_backend(pid) {
            t.settle(database, key, now);
        }
    });
}

/// A lease request's arguments, checked.
pub(crate) struct LeaseArgs {
    ttl_ms: i32,
    timeout_ms: i32,
    slots: u32,
    /// The candidate of a term (`advlock_campaign`, checked there); empty for a plain lease.
    pub(crate) candidate: Vec<u8>,
}

/// Every argument check of a lease request, and the conditions it needs (preload, a writable
/// primary for the token), before anything is taken or committed.
pub(crate) fn check_lease_arguments(
    function: &str,
    ttl_ms: Option<i32>,
    timeout_ms: Option<i32>,
    slots: Option<i32>,
) -> LeaseArgs {
    let args = LeaseArgs {
        ttl_ms: ttl(ttl_ms, function),
        timeout_ms: timeout(timeout_ms, function),
        slots: slot_count(slots, function),
        candidate: Vec::new(),
    };
    if !table::available() {
        shmem::require_preload(function);
    }
    lockmgr::prevent_in_parallel_mode();
    fencing::tokens_possible(function);
    args
}

fn lease(
    target: Target,
    ttl_ms: Option<i32>,
    timeout_ms: Option<i32>,
    slots: Option<i32>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<i64> {
    let args = check_lease_arguments(LEASE, ttl_ms, timeout_ms, slots);
    take(LEASE, target, args, fcinfo)
}

/// Takes a lease: queue, wait until granted or the deadline, draw the token, confirm.
pub(crate) fn take(
    function: &str,
    target: Target,
    args: LeaseArgs,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<i64> {
    let LeaseArgs {
        ttl_ms,
        timeout_ms,
        slots,
        candidate,
    } = args;
    register_exit_callback();
    let (database, key, me) = (backend::database(), target.key, table::me());
    let started = backend::now();
    let enqueued = table::with_table(true, |t| {
        if let Some(in_use) = t.slots_in_use(database, key) {
            if in_use != slots {
                return Err(Refusal::Slots(in_use));
            }
        }
        let Some(waiter) = t.enqueue(me, database, key, slots, started) else {
            return Err(Refusal::Full);
        };
        if t.settle(database, key, started) && t.reservation(waiter).is_none() {
            t.dequeue(waiter);
            return Err(Refusal::Full);
        }
        Ok(waiter)
    })
    .expect("the lease table exists");
    let waiter = match enqueued {
        Ok(waiter) => waiter,
        Err(refusal) => refusal.raise(function, &target, slots),
    };
    let deadline = started + backend::ms_to_us(timeout_ms);
    let granted = PgTryBuilder::new(|| {
        wait_for_grant(waiter, database, key, deadline)?;
        // SAFETY: fcinfo is this call's, with its FmgrInfo.
        let function = unsafe { (*(*fcinfo).flinfo).fn_oid };
        let id = fencing::next_token(function);
        let app = application_name();
        let mut label = [0u8; LABEL_BYTES + 8];
        let (label_len, _) = labels::label_text(&target, &mut label);
        // SAFETY: a backend-local global (the current user).
        let role = unsafe { pg_sys::GetUserId() }.to_u32();
        let grant_end = table::with_table(true, |t| {
            t.confirm(
                waiter,
                Grant {
                    id,
                    role,
                    ttl_ms,
                    app: &app,
                    label: &label[..label_len],
                    candidate: &candidate,
                },
                backend::now(),
            )
        })
        .expect("the lease table exists");
        crate::provisional::lease_taken(id);
        // The grant is as durable as a commit (by synchronous_commit: flushed, and on the
        // synchronous standbys) before the id reaches the client: a crash or a failover keeps
        // the lease.
        lease_wal::flush_grant(grant_end);
        Some(id)
    })
    .catch_others(|error| {
        // A cancel, statement_timeout or a failed token draw: nothing of this call may stay
        // queued or reserved. Then the error goes on as it came (no subtransaction is needed:
        // only advlock's shared memory is touched here).
        forget_me();
        error.rethrow()
    })
    .execute();
    granted
}

enum Refusal {
    Slots(u32),
    Full,
}

impl Refusal {
    fn raise(self, function: &str, target: &Target, slots: u32) -> ! {
        match self {
            Refusal::Slots(in_use) => Report::new(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!(
                    "{function} asked for {slots} slots on {}, which its current leases use with {in_use}",
                    target.describe()
                ),
            )
            .hint("Every lease of one key must use the same slots value.")
            .raise(),
            Refusal::Full => Report::new(
                PgSqlErrorCode::ERRCODE_OUT_OF_MEMORY,
                format!("all {} lease entries are in use", crate::gucs::MAX_LEASES.get()),
            )
            .detail(format!("No lease on {} was taken.", target.describe()))
            .hint("Release leases that are no longer needed, or raise advlock.max_leases (needs a restart).")
            .raise(),
        }
    }
}

/// Sleeps on this backend's latch until `settle` reserves a lease for `waiter` (Some) or the
/// deadline passes (None, and the waiter entry is gone). The key's oldest waiter also wakes at
/// the next expiry of the key's leases, to settle it; the others are woken by whoever changes
/// the key. A grant that races the deadline is kept: the reservation is checked last.
fn wait_for_grant(waiter: usize, database: u32, key: i64, deadline: i64) -> Option<usize> {
    // `take` settled the key when it queued: the first look needs no settling.
    let mut settle = false;
    // What pg_stat_activity shows while this backend sleeps (AdvlockLeaseWait on 17+).
    let wait_event = crate::wait_events::lease_wait();
    loop {
        backend::reset_latch();
        let now = backend::now();
        let (reserved, wake_at) = table::with_table(true, |t| {
            if settle {
                t.settle(database, key, now);
            }
            let reserved = t.reservation(waiter);
            if reserved.is_none() && now >= deadline {
                t.dequeue(waiter);
                t.count_timed_out();
                t.settle(database, key, now);
            }
            let next_expiry = if reserved.is_none() && t.is_head(waiter) {
                t.next_expiry(database, key)
            } else {
                None
            };
            // Every waiter looks again when the lock delay after a promotion ends.
            let wake_at = match (next_expiry, t.grants_paused_until(now)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            (reserved, wake_at)
        })
        .expect("the lease table exists");
        if reserved.is_some() {
            return reserved;
        }
        if now >= deadline {
            return None;
        }
        settle = true;
        let until = wake_at.map_or(deadline, |expiry| expiry.min(deadline));
        // An interrupt raises from here through the caller's catch, which gives the wait up.
        backend::sleep_on_latch(until, now, wait_event);
    }
}

/// The role of held lease `id` in this database, if there is one (expired but not freed yet
/// too: renewing it then frees it, releasing it counts it as expired).
fn owner_of(id: i64) -> Option<u32> {
    let database = backend::database();
    table::with_table(false, |t| t.held(database, id).map(|l| l.role())).flatten()
}

/// Renewing or releasing needs the lease's role or membership in it (checked outside the
/// table's lock: role membership reads the catalog).
fn check_may_manage(function: &str, verb: &str, id: i64, role: u32) {
    // SAFETY: catalog lookups by OID, inside a transaction.
    let (allowed, name) = unsafe {
        let me = pg_sys::GetUserId();
        let owner = pg_sys::Oid::from(role);
        let allowed = pg_sys::has_privs_of_role(me, owner);
        let name = pg_sys::GetUserNameFromId(owner, true);
        let name = if name.is_null() {
            format!("role {role}")
        } else {
            crate::server_text::catalog_name(core::ffi::CStr::from_ptr(name))
        };
        (allowed, name)
    };
    if !allowed {
        Report::new(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!("permission denied to {verb} lease {id}"),
        )
        .detail(format!("The lease belongs to role \"{name}\"."))
        .hint(format!(
            "Call {function} as that role or as a member of it."
        ))
        .raise();
    }
}

pub(crate) fn require_leases(function: &str) {
    if !table::available() {
        shmem::require_preload(function);
    }
}

/// Renewing and releasing change a lease, which only the primary does (and logs): refused on a
/// hot standby, whose table follows the primary's by replay.
fn require_primary(function: &str) {
    if lockmgr::in_recovery() {
        Report::new(
            PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
            format!("{function} cannot run on a hot standby"),
        )
        .detail("A standby's leases are the primary's, replayed from its WAL; they change only there.")
        .hint("Renew and release leases on the primary; advlock_leases, advlock_leader and advlock_observe_leader work on a standby.")
        .raise();
    }
}

#[pg_extern(name = "advlock_lease_renew", volatile, parallel_unsafe)]
fn lease_renew(lease: Option<i64>, ttl_ms: Option<i32>) -> bool {
    let id = required(lease, RENEW, "lease");
    let ttl_ms = ttl(ttl_ms, RENEW);
    require_leases(RENEW);
    require_primary(RENEW);
    let Some(role) = owner_of(id) else {
        return false;
    };
    check_may_manage(RENEW, "renew", id, role);
    let (app, me, database) = (application_name(), table::me(), backend::database());
    let renewed = table::with_table(true, |t| {
        t.renew(database, id, ttl_ms, me, &app, backend::now())
    })
    .unwrap_or(Renewal::NotFound);
    if renewed == Renewal::Expired {
        // Renewed too late, it ended: a statement of this transaction that took it has nothing
        // left to undo for it.
        crate::provisional::lease_ended(id);
    }
    renewed == Renewal::Renewed
}

#[pg_extern(name = "advlock_lease_release", volatile, parallel_unsafe)]
fn lease_release(lease: Option<i64>) -> bool {
    let id = required(lease, RELEASE, "lease");
    release_lease(RELEASE, id)
}

/// Ends lease `id` (a term too: `advlock_resign`) for its role or a member of it; false when it
/// had already ended.
pub(crate) fn release_lease(function: &str, id: i64) -> bool {
    require_leases(function);
    require_primary(function);
    let Some(role) = owner_of(id) else {
        return false;
    };
    check_may_manage(function, "release", id, role);
    let ended = table::end(backend::database(), id);
    crate::provisional::lease_ended(id);
    ended == Ended::Released
}

key_forms! {
    #[pg_extern(name = "advlock_lease", volatile, parallel_unsafe)]
    fn [lease_key, lease_text, lease_int](
        ttl_ms: Option<i32>,
        timeout_ms: Option<i32>,
        slots: default!(Option<i32>, 1),
        fcinfo: pg_sys::FunctionCallInfo,
    ) -> [Option<i64>]
    for LEASE, |target| lease( target, ttl_ms, timeout_ms, slots, fcinfo, )
}

/// The expiry of lease `lease` of this database while an entry holds it: its `expires_at`, in
/// the past for a lease that expired and that nobody has freed yet; NULL when no entry holds it
/// (released, freed after its expiry, lost in a crash window or a failover, or never taken).
/// The feed of `advlock_lease_check` (sql/lease_check.sql), which raises LK002 (a code pgrx
/// cannot raise); `caller` is the function the preload error names.
#[pg_extern(volatile, parallel_restricted)]
fn advlock_lease_expiry(
    lease: Option<i64>,
    caller: default!(Option<ServerText>, "'advlock_lease_expiry'"),
) -> Option<TimestampWithTimeZone> {
    const EXPIRY: &str = "advlock_lease_expiry";
    let caller = required(caller, EXPIRY, "caller").display();
    // advlock_lease_check refuses a NULL lease itself: a NULL here is a direct call's.
    let id = required(lease, EXPIRY, "lease");
    require_leases(&caller);
    let database = backend::database();
    table::with_table(false, |t| t.held(database, id).map(|l| l.expires_at()))
        .flatten()
        .and_then(backend::timestamptz)
}

/// The leases of the current database, held and awaited: the feed of the `advlock_leases` view.
/// No rows without preload.
#[pg_extern(volatile, parallel_restricted)]
#[allow(clippy::type_complexity)]
fn advlock_lease_entries() -> TableIterator<
    'static,
    (
        name!(key, i64),
        name!(label, Option<ServerTextOut>),
        name!(slots, i32),
        name!(lease, Option<i64>),
        name!(granted, bool),
        name!(role, Option<pg_sys::Oid>),
        name!(pid, i32),
        name!(application_name, Option<ServerTextOut>),
        name!(granted_at, Option<TimestampWithTimeZone>),
        name!(renewed_at, Option<TimestampWithTimeZone>),
        name!(expires_at, Option<TimestampWithTimeZone>),
        name!(waiting_since, Option<TimestampWithTimeZone>),
    ),
> {
    let database = backend::database();
    let now = backend::now();
    let rows = table::with_table(false, |t| {
        let mut rows = Vec::new();
        // An expired lease is over even before someone frees its entry: live leases only.
        for l in t.live_in(database, now) {
            let text = |bytes: &[u8]| (!bytes.is_empty()).then(|| ServerTextOut(bytes.to_vec()));
            rows.push((
                l.key(),
                text(l.label()),
                l.slots() as i32,
                Some(l.id()),
                true,
                Some(pg_sys::Oid::from(l.role())),
                l.pid(),
                text(l.app()),
                backend::timestamptz(l.granted_at()),
                backend::timestamptz(l.renewed_at()),
                backend::timestamptz(l.expires_at()),
                None,
            ));
        }
        for w in t.waiting_in(database) {
            rows.push((
                w.key(),
                None,
                w.slots() as i32,
                None,
                false,
                None,
                w.pid(),
                None,
                None,
                None,
                None,
                backend::timestamptz(w.since()),
            ));
        }
        rows
    })
    .unwrap_or_default();
    TableIterator::new(rows)
}

/// Totals of the lease table since the server started (all databases), and its use now.
#[pg_extern(volatile, parallel_restricted)]
#[allow(clippy::type_complexity)]
fn advlock_lease_stats() -> TableIterator<
    'static,
    (
        name!(capacity, i64),
        name!(held, i64),
        name!(waiting, i64),
        name!(granted, i64),
        name!(released, i64),
        name!(expired, i64),
        name!(renewed, i64),
        name!(timed_out, i64),
    ),
> {
    require_leases("advlock_lease_stats");
    let now = backend::now();
    let row = table::with_table(false, |t| {
        let held = t.live(now).count() as i64;
        let waiting = t.waiting().count() as i64;
        let c = t.counters();
        (
            t.capacity() as i64,
            held,
            waiting,
            c.granted as i64,
            c.released as i64,
            c.expired as i64,
            c.renewed as i64,
            c.timed_out as i64,
        )
    })
    .expect("the lease table exists");
    TableIterator::once(row)
}

/// The candidates of the terms held in this database: joined into the `advlock_leases` view by
/// lease id (a function of its own, so that `advlock_lease_entries` keeps its 0.4.0 row type).
#[pg_extern(volatile, parallel_restricted)]
fn advlock_lease_candidates(
) -> TableIterator<'static, (name!(lease, i64), name!(candidate, ServerTextOut))> {
    let database = backend::database();
    let rows = table::with_table(false, |t| {
        t.held_in(database)
            .filter(|l| l.is_term())
            .map(|l| (l.id(), ServerTextOut(l.candidate().to_vec())))
            .collect::<Vec<_>>()
    })
    .unwrap_or_default();
    TableIterator::new(rows)
}

/// Terms since the server started (all databases), for the `advlock_lease_stats` view.
#[pg_extern(volatile, parallel_restricted)]
#[allow(clippy::type_complexity)]
fn advlock_term_stats() -> TableIterator<
    'static,
    (
        name!(terms_started, i64),
        name!(terms_expired, i64),
        name!(terms_resigned, i64),
    ),
> {
    require_leases("advlock_term_stats");
    let c = table::with_table(false, |t| t.counters()).expect("the lease table exists");
    TableIterator::once((
        c.terms_started as i64,
        c.terms_expired as i64,
        c.terms_resigned as i64,
    ))
}

pgrx::extension_sql_file!(
    "../sql/leases.sql",
    name = "leases",
    requires = [
        advlock_lease_entries,
        advlock_lease_stats,
        advlock_lease_candidates,
        advlock_term_stats
    ]
);

pgrx::extension_sql_file!(
    "../sql/lease_check.sql",
    name = "lease_check",
    requires = [advlock_lease_expiry]
);
