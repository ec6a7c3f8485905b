//! Who holds what: the `advlock_holders` view and its helpers (hand-written SQL in
//! `sql/holders.sql`), plus the holder description used in lock-timeout errors.
use crate::backend;
use crate::errors::Report;
use crate::gucs;
use crate::lock_request::Mode;
use crate::lockmgr::{self, AdvisoryEntry, AdvisoryKey};
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
                lockmgr::mode_name(e.mode),
                e.granted,
                (e.pid != 0).then_some(e.pid),
                waiting_since(&e),
            )
        })
        .collect();
    TableIterator::new(rows)
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
/// A hand-written fmgr entry point in materialize mode (the rows go straight into the
/// tuplestore the executor reads), not pgrx's value-per-call iterator, whose per-row call cost
/// as much as building the row; declared by `extension_sql!` below.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn advlock_holder_entries(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: fcinfo is this call's; the SQL signature below is (pids int4[]).
    let pids: Option<Vec<Option<i32>>> = unsafe { pgrx::pg_getarg(fcinfo, 0) };
    let rows = holder_rows(pids.as_deref());
    // SAFETY: called as a set-returning function in a FROM clause (the only way the SQL below
    // allows), so resultinfo is a ReturnSetInfo; InitMaterializedSRF raises otherwise. It builds
    // the tuplestore and the tuple descriptor from the declared result columns; each row's
    // datums are built in the current (per-query) memory context and copied by
    // tuplestore_putvalues.
    unsafe {
        pg_sys::InitMaterializedSRF(fcinfo, 0);
        let rsinfo = (*fcinfo).resultinfo as *mut pg_sys::ReturnSetInfo;
        let (store, desc) = ((*rsinfo).setResult, (*rsinfo).setDesc);
        for row in rows {
            let mut values = [pg_sys::Datum::from(0); 12];
            let mut nulls = [true; 12];
            let mut put = |i: usize, datum: Option<pg_sys::Datum>| {
                if let Some(d) = datum {
                    values[i] = d;
                    nulls[i] = false;
                }
            };
            put(0, row.key.into_datum());
            put(1, row.key1.into_datum());
            put(2, row.key2.into_datum());
            put(3, row.mode.into_datum());
            put(4, row.granted.into_datum());
            put(5, row.pid.into_datum());
            put(6, row.waiting_since.into_datum());
            put(7, row.blocked_by.into_datum());
            put(8, row.label.and_then(|l| l.into_datum()));
            put(9, row.scope.into_datum());
            put(10, row.held_since.into_datum());
            put(11, row.token.into_datum());
            pg_sys::tuplestore_putvalues(store, desc, values.as_mut_ptr(), nulls.as_mut_ptr());
        }
    }
    pg_sys::Datum::from(0)
}

#[unsafe(no_mangle)]
pub extern "C" fn pg_finfo_advlock_holder_entries() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
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

/// One row of `advlock_holder_entries`.
struct HolderRow {
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

fn holder_rows(pids: Option<&[Option<i32>]>) -> Vec<HolderRow> {
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
            let mode = lockmgr::mode_name(e.mode);
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
    let exclusive = |e: &AdvisoryEntry| lockmgr::mode_name(e.mode) == Mode::Exclusive.word();
    waiters
        .into_iter()
        .map(|i| {
            let w = &entries[i];
            let conflicting: Vec<&&AdvisoryEntry> = on_key[&w.key]
                .iter()
                .filter(|o| o.pid != w.pid && (exclusive(o) || exclusive(w)))
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

/// "Held by PID 123 (application_name "worker", state "idle")." for a lock-timeout DETAIL:
/// the granted holders whose mode conflicts with `mode`. Runs only on the error path.
pub fn describe_holders(key: i64, mode: Mode) -> String {
    // Qualified names and operators: this runs with the caller's search_path.
    const QUERY: &str = "
        SELECT pg_catalog.string_agg(pg_catalog.format('PID %s (application_name %s, state %s)',
                   l.pid, pg_catalog.quote_literal(a.application_name), pg_catalog.quote_literal(a.state)),
                   ', ' ORDER BY l.pid)
          FROM pg_catalog.pg_locks l
          LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid OPERATOR(pg_catalog.=) l.pid
         WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory'
           AND l.granted
           AND l.objsubid OPERATOR(pg_catalog.=) 1
           AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
           AND l.classid::pg_catalog.int8 OPERATOR(pg_catalog.=) $1
           AND l.objid::pg_catalog.int8 OPERATOR(pg_catalog.=) $2
           AND ($3 OR l.mode OPERATOR(pg_catalog.=) 'ExclusiveLock')
           AND l.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()";
    // As int8, not oid: pgrx passes an Oid of 0 as SQL NULL, and half of every key below
    // 2^32 is 0.
    let classid = ((key as u64) >> 32) as i64;
    let objid = (key as u64 & 0xffff_ffff) as i64;
    let exclusive = mode == Mode::Exclusive;
    let holders: Option<String> = Spi::connect(|client| {
        client
            .select(
                QUERY,
                Some(1),
                &[classid.into(), objid.into(), exclusive.into()],
            )?
            .first()
            .get_one::<String>()
    })
    .ok()
    .flatten();
    match holders {
        Some(list) => format!("Held by {list}."),
        None => "The holder released it after the wait ended.".to_string(),
    }
}
