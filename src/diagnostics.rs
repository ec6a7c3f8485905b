//! Who holds what: the `advlock_holders` view and its helpers (hand-written SQL in
//! `sql/holders.sql`), plus the holder description used in lock-timeout errors.
use crate::errors::Report;
use crate::gucs;
use crate::lock_request::Mode;
use crate::lockmgr::{self, AdvisoryKey};
use pgrx::datum::Interval;
use pgrx::pg_sys::errcodes::PgSqlErrorCode;
use pgrx::prelude::*;

const MICROS_PER_DAY: i128 = 86_400_000_000;

/// The effective idle threshold: `older_than`, or `advlock.idle_threshold` when NULL.
/// Also loads the library in the calling backend, which defines the GUC.
#[pg_extern(stable, parallel_safe)]
fn advlock_idle_threshold(older_than: default!(Option<Interval>, "NULL")) -> Interval {
    match older_than {
        None => Interval::from_micros(gucs::IDLE_THRESHOLD_MS.get() as i64 * 1000),
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
        None => gucs::IDLE_THRESHOLD_MS.get() as i64 * 1000,
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
            let (key, key1, key2) = match e.key {
                AdvisoryKey::Int8(k) => (Some(k), None, None),
                AdvisoryKey::Int4Pair(a, b) => (None, Some(a), Some(b)),
            };
            let waiting_since = if e.granted || e.wait_start == 0 {
                None
            } else {
                TimestampWithTimeZone::try_from(e.wait_start).ok()
            };
            (
                key,
                key1,
                key2,
                lockmgr::mode_name(e.mode),
                e.granted,
                (e.pid != 0).then_some(e.pid),
                waiting_since,
            )
        })
        .collect();
    TableIterator::new(rows)
}

pgrx::extension_sql_file!(
    "../sql/holders.sql",
    name = "holders",
    requires = [
        advlock_idle_threshold,
        advlock_lock_entries,
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
