//! Leader election on leases: `advlock_campaign`, `advlock_leader`, `advlock_observe_leader`,
//! `advlock_resign` (and the snapshot-free `CALL advlock_wait_campaign` / `advlock_wait_leader`
//! in `snapshot_free_wait`).
//!
//! A term is a lease with one slot that carries a candidate description: campaigning is
//! `advlock_lease(key, ttl_ms, timeout_ms)` plus the candidate, so a term is renewed with
//! `advlock_lease_renew`, ends with `advlock_lease_release` (or `advlock_resign`) or at its
//! expiry, and its id — the term — is a fencing token: terms of one key only grow. The leader of
//! a key is its live lease (any lease on the key, a plain one too, whose candidate is then NULL).
//!
//! Observing: `advlock_observe_leader(key, timeout_ms, known_term)` returns at once when the
//! leader is not `known_term` (NULL: "no leader"), and otherwise sleeps on the backend's latch
//! until it changes or timeout_ms pass. The lease table's code paths that change a key's holders
//! set the latches of the key's observers (`preload::leases::Table::wake_observers`); the
//! observer also wakes at the leader's `expires_at` and settles the key (frees the expired lease
//! and grants it to the oldest campaigning waiter), so an expiry ends the term on time even when
//! no candidate waits. While a waiter has been granted the key but not yet drawn its token (a few
//! microseconds) the observer keeps waiting: it reports the new term rather than a gap.
//!
//! `NOTIFY advlock_leader` with `{"key": K, "term": T, "candidate": "..."}` is sent by every
//! campaign that wins, delivered when its transaction commits (drivers that LISTEN); ends of terms
//! are not notified (an expiry happens in nobody's transaction): observe for those.
use crate::backend;
use crate::errors::{invalid_argument, required};
use crate::leases::{self, LeaseArgs};
use crate::lock_request::{key_forms, timeout, Target};
use crate::lockmgr;
use crate::preload::leases::{self as table, Leadership, CANDIDATE_BYTES};
use crate::server_text::{ServerText, ServerTextOut};
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgTryBuilder;

const CAMPAIGN: &str = "advlock_campaign";
const LEADER: &str = "advlock_leader";
const OBSERVE: &str = "advlock_observe_leader";
const RESIGN: &str = "advlock_resign";
/// The channel `advlock_campaign` notifies when a term starts.
const CHANNEL: &str = "advlock_leader";

/// The candidate argument, checked: 1 to `CANDIDATE_BYTES` bytes, no control characters.
#[track_caller]
pub(crate) fn candidate(value: Option<ServerText>, function: &str) -> Vec<u8> {
    let text = required(value, function, "candidate");
    let bytes = text.as_bytes();
    let hint = "Describe the candidate in a few words (e.g. host or pod name and pid): observers see it as the leader's name.";
    if bytes.is_empty() {
        invalid_argument(
            format!("argument \"candidate\" of {function} must not be empty"),
            hint,
        );
    }
    if bytes.len() > CANDIDATE_BYTES {
        invalid_argument(
            format!(
                "argument \"candidate\" of {function} must be at most {CANDIDATE_BYTES} bytes: {} bytes given ({})",
                bytes.len(),
                text.display()
            ),
            hint,
        );
    }
    // Every server encoding is an ASCII superset whose multibyte characters use no byte below
    // 0x80: a byte below 0x20 (or DEL) is a control character.
    if let Some(at) = bytes.iter().position(|&b| b < 0x20 || b == 0x7f) {
        invalid_argument(
            format!(
                "argument \"candidate\" of {function} must not contain control characters: byte 0x{:02X} at offset {at}",
                bytes[at]
            ),
            hint,
        );
    }
    bytes.to_vec()
}

/// Every check of a campaign, before anything is queued.
pub(crate) fn check_campaign_arguments(
    function: &str,
    ttl_ms: Option<i32>,
    timeout_ms: Option<i32>,
    candidate_arg: Option<ServerText>,
) -> LeaseArgs {
    // Argument errors come first (the candidate is the last argument, checked last).
    let candidate = candidate(candidate_arg, function);
    let mut args = leases::check_lease_arguments(function, ttl_ms, timeout_ms, Some(1));
    args.candidate = candidate;
    args
}

/// A campaign: `leases::take` with the candidate, then the NOTIFY of the term it won. The
/// election layer sends it (not the lease table's taker), so leases never call back up into
/// election.
pub(crate) fn take_term(
    function: &str,
    target: Target,
    args: LeaseArgs,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<i64> {
    let candidate = args.candidate.clone();
    let key = target.key;
    let term = leases::take(function, target, args, fcinfo)?;
    term_started(key, term, &candidate);
    Some(term)
}

/// After `take_term` won a term: the NOTIFY, sent when the transaction commits.
fn term_started(key: i64, term: i64, candidate: &[u8]) {
    let mut payload = format!("{{\"key\": {key}, \"term\": {term}, \"candidate\": \"").into_bytes();
    for &b in candidate {
        // Control characters were refused: only the quote and the backslash need escaping.
        if b == b'"' || b == b'\\' {
            payload.push(b'\\');
        }
        payload.push(b);
    }
    payload.extend_from_slice(b"\"}");
    // SAFETY: pg_notify(text, text) called through fmgr with two non-NULL text datums (the
    // payload is in the server encoding: the candidate's bytes came from a text argument); it
    // queues the notification for this transaction's commit and raises only for a bad channel
    // or a payload over 8000 bytes (ours is under 200).
    unsafe {
        pgrx::direct_function_call_as_datum(
            pg_sys::pg_notify,
            &[CHANNEL.into_datum(), ServerTextOut(payload).into_datum()],
        );
    }
}

fn campaign(
    target: Target,
    ttl_ms: Option<i32>,
    timeout_ms: Option<i32>,
    candidate_arg: Option<ServerText>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<i64> {
    let args = check_campaign_arguments(CAMPAIGN, ttl_ms, timeout_ms, candidate_arg);
    take_term(CAMPAIGN, target, args, fcinfo)
}

key_forms! {
    #[pg_extern(name = "advlock_campaign", volatile, parallel_unsafe)]
    fn [campaign_key, campaign_text, campaign_int](
        ttl_ms: Option<i32>,
        timeout_ms: Option<i32>,
        candidate: Option<ServerText>,
        fcinfo: pg_sys::FunctionCallInfo,
    ) -> [Option<i64>]
    for CAMPAIGN, |target| campaign( target, ttl_ms, timeout_ms, candidate, fcinfo, )
}

/// `advlock_resign(term)`: ends the term now and hands the key to the next candidate; false when
/// it had already ended. The same as `advlock_lease_release` (which counts a term it ends as
/// resigned too).
#[pg_extern(name = "advlock_resign", volatile, parallel_unsafe)]
fn resign(term: Option<i64>) -> bool {
    let term = required(term, RESIGN, "term");
    leases::release_lease(RESIGN, term)
}

/// The leader of a key as copied out of the lease table.
struct Leader {
    term: i64,
    candidate: Vec<u8>,
    since: i64,
    expires_at: i64,
    pid: i32,
    app: Vec<u8>,
}

type LeaderRow = (
    i64,
    Option<ServerTextOut>,
    Option<TimestampWithTimeZone>,
    Option<TimestampWithTimeZone>,
    i32,
    Option<ServerTextOut>,
);

impl Leader {
    fn of(l: &table::Lease) -> Leader {
        Leader {
            term: l.id(),
            candidate: l.candidate().to_vec(),
            since: l.granted_at(),
            expires_at: l.expires_at(),
            pid: l.pid(),
            app: l.app().to_vec(),
        }
    }

    fn row(self) -> LeaderRow {
        let text = |bytes: Vec<u8>| (!bytes.is_empty()).then_some(ServerTextOut(bytes));
        (
            self.term,
            text(self.candidate),
            backend::timestamptz(self.since),
            backend::timestamptz(self.expires_at),
            self.pid,
            text(self.app),
        )
    }
}

fn leader(target: Target) -> Option<LeaderRow> {
    leases::require_leases(LEADER);
    let (database, key, now) = (backend::database(), target.key, backend::now());
    table::with_table(false, |t| match t.leadership(database, key, now) {
        Leadership::Held(l) => Some(Leader::of(l)),
        Leadership::Starting | Leadership::Vacant => None,
    })
    .flatten()
    .map(Leader::row)
}

key_forms! {
    #[pg_extern(name = "advlock_leader", volatile, parallel_restricted)]
    #[allow(clippy::type_complexity)]
    fn [leader_key, leader_text, leader_int](
    ) -> [TableIterator< 'static, ( name!(term, i64), name!(candidate, Option<ServerTextOut>), name!(since, Option<TimestampWithTimeZone>), name!(expires_at, Option<TimestampWithTimeZone>), name!(pid, i32), name!(application_name, Option<ServerTextOut>), ), >]
    for LEADER, |target| TableIterator::new(leader(target))
}

/// What an observation ended with: whether the leader differs from the known term, and the
/// leader now (None: no leader).
pub(crate) struct Observed {
    pub changed: bool,
    leader: Option<Leader>,
}

impl Observed {
    pub(crate) fn term(&self) -> Option<i64> {
        self.leader.as_ref().map(|l| l.term)
    }

    pub(crate) fn candidate(&self) -> Option<Vec<u8>> {
        self.leader
            .as_ref()
            .map(|l| l.candidate.clone())
            .filter(|c| !c.is_empty())
    }
}

/// Waits at most `timeout_ms` for the leader of `key` to differ from `known` (None: no leader).
/// The checks (arguments, preload) are the caller's.
pub(crate) fn observe(key: i64, timeout_ms: i32, known: Option<i64>) -> Observed {
    leases::register_exit_callback();
    let (database, me) = (backend::database(), table::me());
    let observer = table::with_table(true, |t| t.observe(me, database, key))
        .expect("the lease table exists")
        .expect("one observer entry per backend");
    let deadline = backend::now() + backend::ms_to_us(timeout_ms);
    PgTryBuilder::new(|| {
        let observed = watch(database, key, known, deadline);
        table::with_table(true, |t| t.unobserve(observer));
        observed
    })
    .catch_others(|error| {
        // A cancel or statement_timeout: the entry goes with the wait.
        table::with_table(true, |t| t.unobserve(observer));
        error.rethrow()
    })
    .execute()
}

/// The observer's loop: registered before the first look, the latch reset before each look, so
/// a change after a look sets the latch and the next WaitLatch returns at once (no lost wake-up).
fn watch(database: u32, key: i64, known: Option<i64>, deadline: i64) -> Observed {
    // What pg_stat_activity shows while this backend sleeps (AdvlockLeaderObserve on 17+).
    let wait_event = crate::wait_events::leader_observe();
    loop {
        backend::reset_latch();
        let now = backend::now();
        let look = |t: &mut table::Table| match t.leadership(database, key, now) {
            Leadership::Held(l) => (Some(Leader::of(l)), false),
            Leadership::Starting => (None, true),
            Leadership::Vacant => (None, false),
        };
        // Most wakes only read: under the shared lock, unless a lease of the key is past its
        // expiry. Then, under the exclusive lock, it is freed and the key given to the oldest
        // candidate (the expiry is the change being watched; nobody else may notice it).
        let read = table::with_table(false, |t| {
            t.next_expiry(database, key)
                .is_none_or(|at| at > now)
                .then(|| look(t))
        })
        .expect("the lease table exists");
        let (leader, starting) = match read {
            Some(seen) => seen,
            None => table::with_table(true, |t| {
                if t.next_expiry(database, key).is_some_and(|at| at <= now) {
                    t.settle(database, key, now);
                }
                look(t)
            })
            .expect("the lease table exists"),
        };
        let term = leader.as_ref().map(|l| l.term);
        // A granted candidate drawing its token is not reported as a gap: its term follows.
        let changed = term != known && !(starting && known.is_none());
        if (changed && !starting) || now >= deadline {
            return Observed { changed, leader };
        }
        // The known leader's expiry is a change nobody signals: wake for it.
        let until = match &leader {
            Some(l) => l.expires_at.min(deadline),
            None => deadline,
        };
        // An interrupt raises from here through the caller's catch, which gives the wait up.
        backend::sleep_on_latch(until, now, wait_event);
    }
}

/// The SQL form's checks, then the wait.
fn observe_sql(
    target: Target,
    timeout_ms: Option<i32>,
    known: Option<i64>,
) -> TableIterator<'static, ObserveRow> {
    let timeout_ms = timeout(timeout_ms, OBSERVE);
    leases::require_leases(OBSERVE);
    lockmgr::prevent_in_parallel_mode();
    let observed = observe(target.key, timeout_ms, known);
    let row = match observed.leader {
        Some(l) => {
            let (term, candidate, since, expires_at, pid, app) = l.row();
            (
                observed.changed,
                Some(term),
                candidate,
                since,
                expires_at,
                Some(pid),
                app,
            )
        }
        None => (observed.changed, None, None, None, None, None, None),
    };
    TableIterator::once(row)
}

type ObserveRow = (
    bool,
    Option<i64>,
    Option<ServerTextOut>,
    Option<TimestampWithTimeZone>,
    Option<TimestampWithTimeZone>,
    Option<i32>,
    Option<ServerTextOut>,
);

key_forms! {
    #[pg_extern(name = "advlock_observe_leader", volatile, parallel_unsafe)]
    #[allow(clippy::type_complexity)]
    fn [observe_key, observe_text, observe_int](
        timeout_ms: Option<i32>,
        known_term: default!(Option<i64>, "NULL"),
    ) -> [TableIterator< 'static, ( name!(changed, bool), name!(term, Option<i64>), name!(candidate, Option<ServerTextOut>), name!(since, Option<TimestampWithTimeZone>), name!(expires_at, Option<TimestampWithTimeZone>), name!(pid, Option<i32>), name!(application_name, Option<ServerTextOut>), ), >]
    for OBSERVE, |target| observe_sql(target, timeout_ms, known_term)
}
