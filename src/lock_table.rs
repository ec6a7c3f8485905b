//! How full the shared lock table is: `advlock_lock_table`, per database, with the table's
//! capacity, so that a leak or a large key set is seen before every query that needs a lock
//! fails with 53200 "out of shared memory" (hand-written SQL in `sql/lock_table.sql`).
use crate::backend;
use crate::lockmgr;
use crate::server_text::ServerTextOut;
use pgrx::prelude::*;

/// The feed of the `advlock_lock_table` view: one row per database with entries in the shared
/// lock table (the current database always), and one with a NULL database for the locks of no
/// database (or of a database dropped meanwhile); every row carries the table's capacity.
/// Names come from the catalog cache, not from a join with pg_database: a join would lock that
/// shared catalog, which takes an entry of the very table that may be full.
#[pg_extern(volatile, parallel_safe)]
fn advlock_lock_table_entries() -> TableIterator<
    'static,
    (
        name!(datname, Option<ServerTextOut>),
        name!(lock_entries, i64),
        name!(advisory_entries, i64),
        name!(capacity, i64),
    ),
> {
    let usage = lockmgr::lock_table_usage();
    let mut by_database = usage.by_database;
    by_database
        .entry(crate::backend::database())
        .or_insert((0, 0));
    let mut rows: Vec<_> = by_database
        .into_iter()
        .map(|(oid, (entries, advisory))| {
            let datname = (oid != 0)
                .then(|| backend::database_name(oid).map(ServerTextOut))
                .flatten();
            (oid, datname, entries, advisory, usage.capacity)
        })
        .collect();
    rows.sort_by_key(|r| r.0);
    TableIterator::new(
        rows.into_iter()
            .map(|(_, datname, entries, advisory, capacity)| {
                (datname, entries, advisory, capacity)
            }),
    )
}

pgrx::extension_sql_file!(
    "../sql/lock_table.sql",
    name = "lock_table",
    requires = [advlock_lock_table_entries]
);
