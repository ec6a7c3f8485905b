//! Session locks of a statement that fails are released with it.
//!
//! PostgreSQL keeps a session-level advisory lock through rollback. That is right for a lock
//! whose acquisition the client has seen (`true`), and wrong for one it has not: when the
//! statement that took the lock fails afterwards — a later expression raises, a cancel or
//! `statement_timeout` arrives after advlock returned, the commit of an implicit transaction
//! fails — the client gets an error, believes it holds nothing, and the lock would stay until
//! the connection closes.
//!
//! The rule: a session lock an advlock call takes is *provisional* until the statement that took
//! it completes. If that statement fails, each hold it added is released (once per hold, so a hold
//! the session had before stays), in plain and preloaded mode alike. Inside a subtransaction —
//! a savepoint, a plpgsql exception block — the holds the failing statement took in it are
//! released when it aborts. Holds taken by statements that completed keep PostgreSQL's
//! behaviour: they survive `ROLLBACK` and `ROLLBACK TO SAVEPOINT`.
//!
//! Statement end is not observed directly: at an abort, the holds recorded for the statement
//! still running (`lockmgr::statement_identity`) are undone; holds of earlier statements are
//! simply forgotten, at transaction end or when the next one is recorded.
use crate::lock_request::Mode;
use crate::lockmgr;
use crate::preload::labels;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};

struct Provisional {
    key: i64,
    mode: Mode,
    subxact: pg_sys::SubTransactionId,
    statement: (pg_sys::TimestampTz, pg_sys::TimestampTz),
}

thread_local! {
    static PENDING: RefCell<Vec<Provisional>> = const { RefCell::new(Vec::new()) };
    static REGISTERED: Cell<bool> = const { Cell::new(false) };
}

/// After an advlock call took one session hold of (key, mode).
pub fn taken(key: i64, mode: Mode) {
    if !REGISTERED.get() {
        lockmgr::register_transaction_callbacks(Some(on_xact_event), Some(on_subxact_event));
        REGISTERED.set(true);
    }
    let statement = lockmgr::statement_identity();
    PENDING.with_borrow_mut(|pending| {
        // Holds of statements that have completed are the client's now. Every entry belongs to
        // the statement of the last one (older ones are dropped here), so one comparison
        // suffices: an all-or-nothing call may record thousands of holds in one statement.
        if pending.last().is_some_and(|p| p.statement != statement) {
            pending.clear();
        }
        pending.push(Provisional {
            key,
            mode,
            subxact: lockmgr::current_subtransaction(),
            statement,
        });
    });
}

/// After `advlock_unlock` released one session hold: if the running statement took one of
/// (key, mode), that is the hold it gave back, and there is nothing left to undo for it.
pub fn released(key: i64, mode: Mode) {
    let statement = lockmgr::statement_identity();
    PENDING.with_borrow_mut(|pending| {
        if let Some(at) = pending
            .iter()
            .rposition(|p| p.key == key && p.mode == mode && p.statement == statement)
        {
            pending.remove(at);
        }
    });
}

/// Releases the holds the running statement took, in `subxact` or (None) anywhere.
fn undo_failed_statement(subxact: Option<pg_sys::SubTransactionId>) {
    let statement = lockmgr::statement_identity();
    let failed: Vec<(i64, Mode)> = PENDING.with_borrow_mut(|pending| {
        let mut failed = Vec::new();
        pending.retain(|p| {
            let undo = p.statement == statement && subxact.is_none_or(|s| p.subxact == s);
            if undo {
                failed.push((p.key, p.mode));
            }
            !undo
        });
        failed
    });
    for (key, mode) in failed {
        // Not held any more only if something released it behind advlock's back (e.g.
        // pg_advisory_unlock in the same statement); then there is nothing to undo.
        if lockmgr::held_by_me(key, mode) && lockmgr::release_session(key, mode) {
            labels::released_session(key, mode);
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_xact_event(
    event: pg_sys::XactEvent::Type,
    _arg: *mut core::ffi::c_void,
) {
    match event {
        // Called from AbortTransaction, at the error (in a transaction block too) or at
        // ROLLBACK; in the latter case the running statement is ROLLBACK, which took nothing.
        pg_sys::XactEvent::XACT_EVENT_ABORT => {
            undo_failed_statement(None);
            PENDING.with_borrow_mut(Vec::clear);
        }
        pg_sys::XactEvent::XACT_EVENT_COMMIT | pg_sys::XactEvent::XACT_EVENT_PREPARE => {
            PENDING.with_borrow_mut(Vec::clear);
        }
        _ => {}
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_subxact_event(
    event: pg_sys::SubXactEvent::Type,
    my_subid: pg_sys::SubTransactionId,
    parent_subid: pg_sys::SubTransactionId,
    _arg: *mut core::ffi::c_void,
) {
    match event {
        pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB => undo_failed_statement(Some(my_subid)),
        pg_sys::SubXactEvent::SUBXACT_EVENT_COMMIT_SUB => PENDING.with_borrow_mut(|pending| {
            for p in pending.iter_mut().filter(|p| p.subxact == my_subid) {
                p.subxact = parent_subid;
            }
        }),
        _ => {}
    }
}
