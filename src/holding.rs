//! "Am I still the holder?": `advlock_holding`, the cheap check a leader loop runs before each
//! unit of work (a session lock is lost silently when the connection is reset or terminated and
//! the pool reconnects).
use crate::lock_request::{key_forms, Mode, Target};
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
key_forms! {
    #[pg_extern(name = "advlock_holding")]
    fn [holding_key, holding_text, holding_int](
        mode: default!(Option<ServerText>, "'exclusive'"),
    ) -> [bool]
    for HOLDING, |target| holding(target, mode)
}
