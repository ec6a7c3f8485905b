//! Session locks of a statement that fails are released with it.
//!
//! PostgreSQL keeps a session-level advisory lock through rollback. That is right for a lock
//! whose acquisition the client has seen (`true`), and wrong for one it has not: when the
//! statement that took the lock fails afterwards — a later expression raises, a cancel or
//! `statement_timeout` arrives after advlock returned, the commit of an implicit transaction
//! fails — the client gets an error, believes it holds nothing, and the lock would stay until
//! the connection closes.
//!
//! The rule: a session hold an advlock call takes is *provisional* until the client statement
//! that took it completes. A client statement is one simple-protocol Query message (all its
//! `;`-separated statements, a CALL or DO block with every COMMIT and ROLLBACK inside it), or,
//! in the extended protocol, one Execute — and every Execute up to the next Sync while they run
//! in one implicit transaction (a pipeline or asyncpg's `executemany`: all or nothing, one error
//! for the batch). If the client statement fails, each hold it added is released (once per hold,
//! so a hold the session had before stays), whatever COMMIT, SAVEPOINT or ROLLBACK ran inside it
//! first. A rollback that the statement itself asked for — ROLLBACK or ROLLBACK TO SAVEPOINT in
//! the message, a procedure's ROLLBACK — is not a failure: the holds survive it, as PostgreSQL's
//! session locks do, and stay provisional until the statement ends. A caught error (a plpgsql
//! exception block, a savepoint of PL code) releases the holds taken inside the subtransaction
//! it rolls back. Holds of completed statements are the client's: ROLLBACK never touches them.
//!
//! Statement end is not observed directly; what is observed is how each abort happens
//! (`lockmgr::outside_client_statement`, `lockmgr::explicit_rollback_in_progress`). At an
//! abort by an error that reached the top level, the holds of the running client statement are
//! undone; holds of earlier statements are simply forgotten — when the next one is recorded,
//! at such an abort, or at a commit outside any message (an extended-protocol Sync).
use crate::lock_request::Mode;
use crate::lockmgr;
use crate::preload::labels;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};

/// Which client statement took a hold.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Statement {
    /// The message's start (`lockmgr::message_start`).
    message: pg_sys::TimestampTz,
    /// Outside a transaction block, the implicit transaction's start: every Execute of one
    /// extended-protocol batch shares it. None inside a block, where each message stands alone.
    batch: Option<pg_sys::TimestampTz>,
}

impl Statement {
    fn running() -> Self {
        Statement {
            message: lockmgr::message_start(),
            batch: (!lockmgr::in_transaction_block()).then(lockmgr::transaction_start),
        }
    }

    /// Whether a hold taken by `self` belongs to the client statement now running.
    fn is_running(&self) -> bool {
        self.message == lockmgr::message_start()
            || self
                .batch
                .is_some_and(|b| b == lockmgr::transaction_start())
    }
}

struct Provisional {
    key: i64,
    mode: Mode,
    subxact: pg_sys::SubTransactionId,
    statement: Statement,
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
    let statement = Statement::running();
    PENDING.with_borrow_mut(|pending| {
        // Holds of statements that have completed are the client's now. The entries are in the
        // order they were taken and all but the running statement's are dropped here, so one
        // test of the last suffices: an all-or-nothing call may record thousands of holds.
        if pending.last().is_some_and(|p| !p.statement.is_running()) {
            pending.retain(|p| p.statement.is_running());
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
    PENDING.with_borrow_mut(|pending| {
        if let Some(at) = pending
            .iter()
            .rposition(|p| p.key == key && p.mode == mode && p.statement.is_running())
        {
            pending.remove(at);
        }
    });
}

/// Releases the holds the running statement took, in `subxact` or (None) anywhere.
fn undo_failed_statement(subxact: Option<pg_sys::SubTransactionId>) {
    let failed: Vec<(i64, Mode)> = PENDING.with_borrow_mut(|pending| {
        let mut failed = Vec::new();
        pending.retain(|p| {
            let undo = p.statement.is_running() && subxact.is_none_or(|s| p.subxact == s);
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

/// A transaction ended inside the running message (a procedure's COMMIT or ROLLBACK, a COMMIT
/// in a multi-statement Query): its subtransactions are gone, the pending holds stay pending.
fn carry_into_next_transaction() {
    PENDING.with_borrow_mut(|pending| {
        for p in pending.iter_mut() {
            p.subxact = lockmgr::TOP_SUBTRANSACTION;
        }
    });
}

#[pg_guard]
unsafe extern "C-unwind" fn on_xact_event(
    event: pg_sys::XactEvent::Type,
    _arg: *mut core::ffi::c_void,
) {
    match event {
        // AbortTransaction runs at an error (in a transaction block too), at the client's
        // ROLLBACK and at a procedure's ROLLBACK; only an error that reached the top level,
        // whose recovery runs outside any statement, ends the client statement.
        pg_sys::XactEvent::XACT_EVENT_ABORT => {
            if lockmgr::outside_client_statement() {
                undo_failed_statement(None);
                PENDING.with_borrow_mut(Vec::clear);
            } else {
                carry_into_next_transaction();
            }
        }
        // Outside a message (an extended-protocol Sync) a commit ends the client statement;
        // inside one (a procedure's COMMIT) the statement goes on and may still fail.
        pg_sys::XactEvent::XACT_EVENT_COMMIT => {
            if lockmgr::outside_client_statement() {
                PENDING.with_borrow_mut(Vec::clear);
            } else {
                carry_into_next_transaction();
            }
        }
        pg_sys::XactEvent::XACT_EVENT_PREPARE => PENDING.with_borrow_mut(Vec::clear),
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
        // acquire_within's own subtransaction ends a wait it handles itself.
        _ if lockmgr::in_wait_subtransaction() => {}
        pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB => {
            if lockmgr::outside_client_statement() {
                // An error ended the client statement inside a savepoint: all its holds go,
                // those it took before the SAVEPOINT included.
                undo_failed_statement(None);
            } else if !lockmgr::explicit_rollback_in_progress() {
                // A caught error: the failed work of this subtransaction is undone.
                undo_failed_statement(Some(my_subid));
            }
        }
        pg_sys::SubXactEvent::SUBXACT_EVENT_COMMIT_SUB => PENDING.with_borrow_mut(|pending| {
            for p in pending.iter_mut().filter(|p| p.subxact == my_subid) {
                p.subxact = parent_subid;
            }
        }),
        _ => {}
    }
}
