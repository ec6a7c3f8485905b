//! "Am I still the holder?": `advlock_holding`, the cheap check a leader loop runs before each
//! unit of work (a session lock is lost silently when the connection is reset or terminated and
//! the pool reconnects).
use crate::lock_request::{Mode, Target};
use crate::lockmgr;
use crate::server_text::ServerText;
use pgrx::prelude::*;

const HOLDING: &str = "advlock_holding";

fn holding(target: Target, mode: Option<ServerText>) -> bool {
    let mode = Mode::parse(mode, HOLDING);
    // This backend's own lock table: no shared lock-table scan, any scope.
    lockmgr::held_by_me(target.key, mode)
}

// PARALLEL UNSAFE (the default): a parallel worker has its own, empty, table of held locks.
#[pg_extern(name = "advlock_holding")]
fn holding_key(key: Option<i64>, mode: default!(Option<ServerText>, "'exclusive'")) -> bool {
    holding(Target::from_key(key, HOLDING), mode)
}

#[pg_extern(name = "advlock_holding")]
fn holding_text(
    ns: Option<ServerText>,
    id: Option<ServerText>,
    mode: default!(Option<ServerText>, "'exclusive'"),
) -> bool {
    holding(Target::from_text(ns, id, HOLDING), mode)
}

#[pg_extern(name = "advlock_holding")]
fn holding_int(
    ns: Option<ServerText>,
    id: Option<i64>,
    mode: default!(Option<ServerText>, "'exclusive'"),
) -> bool {
    holding(Target::from_int(ns, id, HOLDING), mode)
}
