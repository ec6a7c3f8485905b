//! Monitoring that stays cheap on a busy server: `advlock_metrics` (gauges per namespace and
//! state, and the preloaded counters) and `advlock_leak_count`, computed in Rust from the lock
//! table and the backend-status snapshot — no SQL join through `pg_stat_activity`, no tuple per
//! lock. Run every 15–60 s by exporters, so the common, healthy case is the fast one:
//! `advlock_leak_count` does not read the lock table at all when no backend of the database
//! has been idle past the threshold (and none is hidden from the caller).
use crate::activity::{self, Activity, State};
use crate::backend;
use crate::diagnostics::idle_threshold_micros;
use crate::errors::{counted, Report};
use crate::lock_mode::Mode;
use crate::lockmgr::{self, AdvisoryKey};
use crate::preload::{labels, stats};
use crate::server_text::ServerTextOut;
use pgrx::datum::Interval;
use pgrx::pg_sys;
use pgrx::pg_sys::errcodes::PgSqlErrorCode;
use pgrx::prelude::*;
use std::collections::{BTreeMap, HashMap, HashSet};

const LEAK_COUNT: &str = "advlock_leak_count";

fn leaked(activity: &Activity, now: pg_sys::TimestampTz, threshold_us: i64) -> bool {
    activity.visible
        && activity.state == State::Idle
        && now.saturating_sub(activity.state_since) >= threshold_us
}

/// Backends holding advisory locks in this database while idle for at least `older_than`
/// (NULL: advlock.idle_threshold). Raises 42501 when pg_stat_activity hides a holder's
/// activity from the caller: a count that cannot see every holder must not read as "no leak".
#[pg_extern(stable, parallel_restricted)]
fn advlock_leak_count(older_than: default!(Option<Interval>, "NULL")) -> i32 {
    let threshold_us = idle_threshold_micros(older_than, LEAK_COUNT);
    let backends = activity::backends_of_my_database();
    let now = backend::now();
    // Only these backends can make the answer non-zero; without any, the lock table is not read.
    let candidates: HashMap<i32, &Activity> = backends
        .iter()
        .filter(|(_, a)| !a.visible || leaked(a, now, threshold_us))
        .map(|(pid, a)| (*pid, a))
        .collect();
    if candidates.is_empty() {
        return 0;
    }
    // Only the candidates' own lock lists are read.
    let holders: HashSet<i32> =
        lockmgr::advisory_entries_in_my_database_of(Some(&|pid| candidates.contains_key(&pid)))
            .into_iter()
            .filter(|e| e.granted)
            .map(|e| e.pid)
            .collect();
    let hidden = holders
        .iter()
        .filter(|pid| !candidates[pid].visible)
        .count();
    if hidden > 0 {
        let user = current_user();
        Report::new(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!(
                "{LEAK_COUNT} cannot see the activity of {} holding advisory locks",
                counted(hidden, "backend", "backends")
            ),
        )
        .detail(format!(
            "pg_stat_activity hides their state from role {user}, so a leak among them could not be counted."
        ))
        .hint(format!(
            "Monitoring needs pg_read_all_stats (or pg_monitor): GRANT pg_monitor TO {};",
            quote_ident(&user)
        ))
        .raise();
    }
    holders.len() as i32
}

/// Gauges and counters of one namespace (None: not known).
#[derive(Default)]
struct Row {
    holders: HashSet<i32>,
    locks: i32,
    leaked_holders: HashSet<i32>,
    leaked_locks: i32,
    idle_in_transaction_holders: HashSet<i32>,
    hidden_holders: HashSet<i32>,
    waiters: i32,
    oldest_wait: Option<pg_sys::TimestampTz>,
    oldest_hold: Option<pg_sys::TimestampTz>,
    counters: Option<stats::Counters>,
}

fn earliest(a: Option<pg_sys::TimestampTz>, b: pg_sys::TimestampTz) -> Option<pg_sys::TimestampTz> {
    Some(a.map_or(b, |a| a.min(b)))
}

fn seconds_since(now: pg_sys::TimestampTz, t: Option<pg_sys::TimestampTz>) -> Option<f64> {
    t.map(|t| (now - t).max(0) as f64 / 1e6)
}

/// One row per namespace of this database (from the preloaded labels and statistics) plus one
/// with `ns` NULL (locks whose namespace is not known: bare keys, int4-pair keys, or every
/// lock without preload), so every gauge exists, at 0, when nothing is held. Holders are
/// backends; leaked holders are idle (outside any transaction) for at least
/// advlock.idle_threshold; hidden holders are those whose activity the caller may not see.
/// The counters and oldest_hold_seconds need shared_preload_libraries (NULL otherwise);
/// idle_terminations counts sessions advlock.idle_session_lock_timeout ended while they held a
/// lock of the namespace.
#[pg_extern(volatile, parallel_restricted)]
#[allow(clippy::type_complexity)]
fn advlock_metrics() -> TableIterator<
    'static,
    (
        name!(ns, Option<ServerTextOut>),
        name!(holders, i32),
        name!(locks, i32),
        name!(leaked_holders, i32),
        name!(leaked_locks, i32),
        name!(idle_in_transaction_holders, i32),
        name!(hidden_holders, i32),
        name!(waiters, i32),
        name!(oldest_wait_seconds, Option<f64>),
        name!(oldest_hold_seconds, Option<f64>),
        name!(acquisitions, Option<i64>),
        name!(immediate, Option<i64>),
        name!(waits, Option<i64>),
        name!(timeouts, Option<i64>),
        name!(wait_seconds, Option<f64>),
        name!(preloaded, bool),
        name!(idle_terminations, Option<i64>),
    ),
> {
    let threshold_us = idle_threshold_micros(None, "advlock_metrics");
    let backends = activity::backends_of_my_database();
    let entries = lockmgr::advisory_entries_in_my_database();
    let now = backend::now();
    let recorded = labels::recorded_holds();
    let counters = stats::namespace_counters();
    let preloaded = recorded.is_some();

    // What the labels say: the namespace of each labelled hold, and of each labelled key (a
    // waiter's namespace is that of the key it waits for).
    let mut hold_ns: HashMap<(i32, i64, bool), (&[u8], pg_sys::TimestampTz)> = HashMap::new();
    let mut key_ns: HashMap<i64, &[u8]> = HashMap::new();
    for h in recorded.iter().flatten().filter(|h| !h.ns.is_empty()) {
        hold_ns.insert((h.pid, h.key, h.shared), (&h.ns, h.since));
        key_ns.insert(h.key, &h.ns);
    }

    let mut rows: BTreeMap<Option<Vec<u8>>, Row> = BTreeMap::new();
    rows.entry(None).or_default();
    for row in counters.into_iter().flatten() {
        rows.entry(row.ns).or_default().counters = Some(row.counters);
    }
    for e in &entries {
        let int8_key = match e.key {
            AdvisoryKey::Int8(k) => Some(k),
            AdvisoryKey::Int4Pair(..) => None,
        };
        if !e.granted {
            let ns = int8_key.and_then(|k| key_ns.get(&k)).map(|ns| ns.to_vec());
            let row = rows.entry(ns).or_default();
            row.waiters += 1;
            if e.wait_start != 0 {
                row.oldest_wait = earliest(row.oldest_wait, e.wait_start);
            }
            continue;
        }
        let labelled =
            int8_key.and_then(|k| hold_ns.get(&(e.pid, k, e.mode.advlock() == Some(Mode::Shared))));
        let row = rows.entry(labelled.map(|(ns, _)| ns.to_vec())).or_default();
        row.holders.insert(e.pid);
        row.locks += 1;
        if let Some((_, since)) = labelled {
            row.oldest_hold = earliest(row.oldest_hold, *since);
        }
        match backends.get(&e.pid) {
            Some(a) if !a.visible => {
                row.hidden_holders.insert(e.pid);
            }
            Some(a) if leaked(a, now, threshold_us) => {
                row.leaked_holders.insert(e.pid);
                row.leaked_locks += 1;
            }
            Some(a) if a.state == State::IdleInTransaction => {
                row.idle_in_transaction_holders.insert(e.pid);
            }
            _ => {}
        }
    }
    // Namespaces by name, the unknown (NULL) row last, as ORDER BY ns would.
    let mut rows: Vec<_> = rows.into_iter().collect();
    rows.sort_by(|a, b| (a.0.is_none(), &a.0).cmp(&(b.0.is_none(), &b.0)));
    TableIterator::new(rows.into_iter().map(move |(ns, r)| {
        let c = r.counters.as_ref();
        (
            ns.map(ServerTextOut),
            r.holders.len() as i32,
            r.locks,
            r.leaked_holders.len() as i32,
            r.leaked_locks,
            r.idle_in_transaction_holders.len() as i32,
            r.hidden_holders.len() as i32,
            r.waiters,
            seconds_since(now, r.oldest_wait),
            seconds_since(now, r.oldest_hold),
            preloaded.then(|| c.map_or(0, |c| c.acquisitions as i64)),
            preloaded.then(|| c.map_or(0, |c| c.immediate as i64)),
            preloaded.then(|| c.map_or(0, |c| c.waits as i64)),
            preloaded.then(|| c.map_or(0, |c| c.timeouts as i64)),
            preloaded.then(|| c.map_or(0.0, |c| c.wait_us as f64 / 1e6)),
            preloaded,
            preloaded.then(|| c.map_or(0, |c| c.idle_terminations as i64)),
        )
    }))
}

fn current_user() -> String {
    // SAFETY: the name of the current user, palloc'd; read at once.
    unsafe {
        let name = pg_sys::GetUserNameFromId(pg_sys::GetUserId(), false);
        crate::server_text::catalog_name(core::ffi::CStr::from_ptr(name))
    }
}

fn quote_ident(name: &str) -> String {
    let c = std::ffi::CString::new(name).expect("role names contain no NUL");
    // SAFETY: quote_identifier returns its argument or a palloc'd quoted copy.
    unsafe {
        core::ffi::CStr::from_ptr(pg_sys::quote_identifier(c.as_ptr()))
            .to_string_lossy()
            .into_owned()
    }
}

pgrx::extension_sql_file!(
    "../sql/metrics.sql",
    name = "metrics",
    requires = [advlock_metrics]
);
