//! Who holds what: the `advlock_holders` view and its helpers (hand-written SQL in
//! `sql/holders.sql`), plus the holder description used in lock-timeout errors.
use crate::activity;
use crate::backend;
use crate::errors::Report;
use crate::gucs;
use crate::lock_request::Mode;
use crate::lockmgr::{self, AdvisoryEntry, AdvisoryKey, EntryMode};
use crate::preload::labels;
use crate::server_text::ServerTextOut;
use pgrx::datum::Interval;
use pgrx::pg_sys::errcodes::PgSqlErrorCode;
use pgrx::prelude::*;
use std::collections::{HashMap, HashSet};

const MICROS_PER_DAY: i128 = 86_400_000_000;

/// The effective idle threshold: `older_than`, or `advlock.idle_threshold` when NULL.
/// Also loads the library in the calling backend, which defines the GUC.
#[pg_extern(stable, parallel_safe)]
fn advlock_idle_threshold(older_than: default!(Option<Interval>, "NULL")) -> Interval {
    match older_than {
        None => Interval::from_micros(backend::ms_to_us(gucs::IDLE_THRESHOLD_MS.get())),
        Some(interval) => {
            if micros_of(&interval) < 0 {
                negative_older_than(
                    "advlock_idle_threshold",
                    "Pass how long a holder must have been idle, e.g. interval '5 minutes'.",
                );
            }
            interval
        }
    }
}

/// 22023 for a negative `older_than`, under the name of the function called.
fn negative_older_than(function: &str, hint: &str) -> ! {
    Report::new(
        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        format!("argument \"older_than\" of {function} must not be a negative interval"),
    )
    .hint(hint)
    .raise()
}

/// interval_cmp's own normalisation: a month is 30 days.
fn micros_of(interval: &Interval) -> i128 {
    (interval.months() as i128 * 30 + interval.days() as i128) * MICROS_PER_DAY
        + interval.micros() as i128
}

/// The idle threshold in microseconds for `function`'s `older_than` argument (NULL: the
/// setting), rejecting a negative interval under that function's name.
pub fn idle_threshold_micros(older_than: Option<Interval>, function: &str) -> i64 {
    match older_than {
        None => backend::ms_to_us(gucs::IDLE_THRESHOLD_MS.get()),
        Some(interval) => {
            let micros = micros_of(&interval);
            if micros < 0 {
                negative_older_than(
                    function,
                    "Pass how long a holder must have been idle, e.g. interval '5 minutes', or NULL for advlock.idle_threshold.",
                );
            }
            micros.min(i64::MAX as i128) as i64
        }
    }
}

/// The advisory locks of the current database (held and awaited), decoded: the raw feed of the
/// `advlock_holders` view, as `pg_lock_status()` is of `pg_locks`, but filtered before any
/// tuple is built.
#[pg_extern]
#[allow(clippy::type_complexity)]
fn advlock_lock_entries() -> TableIterator<
    'static,
    (
        name!(key, Option<i64>),
        name!(key1, Option<i32>),
        name!(key2, Option<i32>),
        name!(mode, &'static str),
        name!(granted, bool),
        name!(pid, Option<i32>),
        name!(waiting_since, Option<TimestampWithTimeZone>),
    ),
> {
    let rows: Vec<_> = lockmgr::advisory_entries_in_my_database()
        .into_iter()
        .map(|e| {
            let (key, key1, key2) = key_columns(e.key);
            (
                key,
                key1,
                key2,
                e.mode.name(),
                e.granted,
                (e.pid != 0).then_some(e.pid),
                waiting_since(&e),
            )
        })
        .collect();
    TableIterator::new(rows)
}

pgrx::extension_sql!(
    r#"
-- advlock_holders' feed (src/diagnostics.rs): a C function of the library, declared here.
CREATE FUNCTION @extschema@.advlock_holder_entries(pids integer[] DEFAULT NULL)
RETURNS TABLE(key bigint, key1 integer, key2 integer, mode text, granted boolean, pid integer,
              waiting_since timestamp with time zone, blocked_by integer[], label text,
              scope text, held_since timestamp with time zone, token bigint)
VOLATILE PARALLEL RESTRICTED
LANGUAGE c AS 'MODULE_PATHNAME', 'advlock_holder_entries';
"#,
    name = "holder_entries",
);

/// The number of result columns of `advlock_holder_entries` (its `RETURNS TABLE` above).
pub const HOLDER_ENTRY_COLUMNS: usize = 12;

/// One row of `advlock_holder_entries`.
pub struct HolderRow {
    key: Option<i64>,
    key1: Option<i32>,
    key2: Option<i32>,
    mode: &'static str,
    granted: bool,
    pid: Option<i32>,
    waiting_since: Option<TimestampWithTimeZone>,
    blocked_by: Option<Vec<i32>>,
    label: Option<ServerTextOut>,
    scope: Option<&'static str>,
    held_since: Option<TimestampWithTimeZone>,
    token: Option<i64>,
}

impl HolderRow {
    /// The row's datums in the order of the declared result columns (None: NULL), built in the
    /// current memory context.
    pub fn into_datums(self) -> [Option<pg_sys::Datum>; HOLDER_ENTRY_COLUMNS] {
        [
            self.key.into_datum(),
            self.key1.into_datum(),
            self.key2.into_datum(),
            self.mode.into_datum(),
            self.granted.into_datum(),
            self.pid.into_datum(),
            self.waiting_since.into_datum(),
            self.blocked_by.into_datum(),
            self.label.and_then(|l| l.into_datum()),
            self.scope.into_datum(),
            self.held_since.into_datum(),
            self.token.into_datum(),
        ]
    }
}

/// The rows of `advlock_holders` without the backend columns (the view joins those from
/// `pg_stat_activity`), in one pass over one snapshot of the lock table: every advisory lock of
/// this database, held and awaited; for a waiter, who blocks it (`blocked_by`, from the same
/// snapshot, so a waiter is never shown blocked by nobody); for a granted lock, what advlock
/// recorded when it granted it (preloaded only), looked up by hash.
///
/// `pids`: when given, only the granted locks of these backends (the hidden-holder count of
/// `advlock_idle_holders`, which reads only those backends' lock lists).
///
/// Its entry point is hand-written (`fmgr::advlock_holder_entries`, in materialize mode);
/// declared by `extension_sql!` below, whose result columns number [`HOLDER_ENTRY_COLUMNS`].
pub fn holder_rows(pids: Option<&[Option<i32>]>) -> Vec<HolderRow> {
    let entries = match pids {
        None => lockmgr::advisory_entries_in_my_database(),
        Some(pids) => {
            if pids.contains(&None) {
                Report::new(
                    PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
                    "argument \"pids\" of advlock_holder_entries must not contain NULL",
                )
                .hint("Pass backend pids, or NULL (the whole argument) for every lock.")
                .raise();
            }
            let only: HashSet<i32> = pids.iter().flatten().copied().collect();
            let mut entries =
                lockmgr::advisory_entries_in_my_database_of(Some(&|pid| only.contains(&pid)));
            entries.retain(|e| e.granted);
            entries
        }
    };
    let mut blocked_by = blockers(&entries);
    // Only granted int8 locks can carry a label or token: no lookup table without any.
    let mut recorded = entries
        .iter()
        .any(|e| e.granted && matches!(e.key, AdvisoryKey::Int8(_)))
        .then(labels::recorded_locks)
        .flatten();
    entries
        .iter()
        .enumerate()
        .map(|(index, e)| {
            let (key, key1, key2) = key_columns(e.key);
            let mode = e.mode.name();
            let mine = match (&mut recorded, e.granted, key) {
                (Some(recorded), true, Some(k)) => {
                    recorded.get(e.pid, k, mode == Mode::Shared.word())
                }
                _ => None,
            };
            let (label, scope, held_since, token) = match mine {
                Some(r) => (
                    r.label.map(ServerTextOut),
                    Some(r.scope),
                    backend::timestamptz(r.since),
                    (r.token != 0).then_some(r.token),
                ),
                None => (None, None, None, None),
            };
            HolderRow {
                key,
                key1,
                key2,
                mode,
                granted: e.granted,
                pid: (e.pid != 0).then_some(e.pid),
                waiting_since: waiting_since(e),
                blocked_by: blocked_by.remove(&index),
                label,
                scope,
                held_since,
                token,
            }
        })
        .collect()
}

/// The (key, key1, key2) columns: key for an int8 key, key1 and key2 for an int4 pair.
fn key_columns(key: AdvisoryKey) -> (Option<i64>, Option<i32>, Option<i32>) {
    match key {
        AdvisoryKey::Int8(k) => (Some(k), None, None),
        AdvisoryKey::Int4Pair(a, b) => (None, Some(a), Some(b)),
    }
}

fn waiting_since(e: &AdvisoryEntry) -> Option<TimestampWithTimeZone> {
    if e.granted || e.wait_start == 0 {
        None
    } else {
        backend::timestamptz(e.wait_start)
    }
}

/// Who blocks each waiter (by index into `entries`), as `pg_blocking_pids()` defines it but from
/// the same snapshot: the holders of a conflicting mode of the same lock, and the waiters for a
/// conflicting mode queued ahead of it (an earlier wait start; one whose wait start is not yet
/// recorded is queued last). Should that order leave nobody (two wait starts recorded out of
/// queue order), every conflicting holder and waiter: in a consistent snapshot a waiter always
/// has one. Sorted pids, each once; a prepared transaction shows as 0, as in
/// `pg_blocking_pids()`. Nothing is built when nobody waits.
fn blockers(entries: &[AdvisoryEntry]) -> HashMap<usize, Vec<i32>> {
    let waiters: Vec<usize> = (0..entries.len())
        .filter(|&i| !entries[i].granted)
        .collect();
    if waiters.is_empty() {
        return HashMap::new();
    }
    let contested: HashSet<AdvisoryKey> = waiters.iter().map(|&i| entries[i].key).collect();
    let mut on_key: HashMap<AdvisoryKey, Vec<&AdvisoryEntry>> = HashMap::new();
    for e in entries.iter().filter(|e| contested.contains(&e.key)) {
        on_key.entry(e.key).or_default().push(e);
    }
    waiters
        .into_iter()
        .map(|i| {
            let w = &entries[i];
            let conflicting: Vec<&&AdvisoryEntry> = on_key[&w.key]
                .iter()
                .filter(|o| o.pid != w.pid && o.mode.conflicts(w.mode))
                .collect();
            let ahead = |o: &AdvisoryEntry| {
                o.granted
                    || (o.wait_start != 0 && (w.wait_start == 0 || o.wait_start < w.wait_start))
            };
            let mut pids: Vec<i32> = conflicting
                .iter()
                .filter(|o| ahead(o))
                .map(|o| o.pid)
                .collect();
            if pids.is_empty() {
                pids = conflicting.iter().map(|o| o.pid).collect();
            }
            pids.sort_unstable();
            pids.dedup();
            (i, pids)
        })
        .collect()
}

pgrx::extension_sql_file!(
    "../sql/holders.sql",
    name = "holders",
    requires = [
        advlock_idle_threshold,
        advlock_lock_entries,
        "holder_entries",
        labels::advlock_labels,
        labels::advlock_tokens
    ]
);

/// "Held by PID 123 (application_name 'worker', state 'idle')." for a lock-timeout DETAIL: the
/// granted holders of the key (other than this backend, and not prepared transactions) whose
/// mode conflicts with `mode`, from one snapshot of the lock table (as `advlock_holders` and
/// its `blocked_by`), with what pg_stat_activity shows the caller of each. Runs only on the
/// error path.
pub fn describe_holders(key: i64, mode: Mode) -> String {
    let me = backend::pid();
    let asked = EntryMode::of(mode);
    let mut holders: Vec<i32> = lockmgr::advisory_entries_in_my_database()
        .into_iter()
        .filter(|e| {
            e.granted
                && e.key == AdvisoryKey::Int8(key)
                && e.pid != me
                && e.pid != 0
                && e.mode.conflicts(asked)
        })
        .map(|e| e.pid)
        .collect();
    if holders.is_empty() {
        return "The holder released it after the wait ended.".to_string();
    }
    holders.sort_unstable();
    let activity = activity::backends_of_my_database();
    let list: Vec<String> = holders
        .into_iter()
        .map(|pid| {
            let a = activity.get(&pid);
            // pg_stat_activity's NULLs print as nothing, as format('%s', NULL) did.
            let app = a.map_or(String::new(), |a| quote_literal(&a.application_name));
            let state = a
                .and_then(|a| a.state_name)
                .map_or(String::new(), quote_literal);
            format!("PID {pid} (application_name {app}, state {state})")
        })
        .collect();
    format!("Held by {}.", list.join(", "))
}

/// SQL's quote_literal: in single quotes, quotes doubled, and with an E prefix and doubled
/// backslashes when there is a backslash.
fn quote_literal(text: &str) -> String {
    let quoted = text.replace('\'', "''");
    if text.contains('\\') {
        format!("E'{}'", quoted.replace('\\', "\\\\"))
    } else {
        format!("'{quoted}'")
    }
}
