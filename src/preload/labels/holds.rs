//! This backend's record of what it labelled: (key, mode) -> slot and hold counts, and the
//! callbacks that return slots once the lock manager no longer holds the lock (advlock_unlock,
//! transaction and subtransaction end, backend exit).
use super::table::*;
use crate::backend;
use crate::lock_request::{Id, Mode, Scope, Target};
use crate::{keys, lockmgr};
use core::sync::atomic::Ordering;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;

/// What this backend recorded for one (key, mode).
pub(super) struct Hold {
    slot: u32,
    xact: u32,
    session: u32,
    since: i64,
}

impl Hold {
    pub(super) fn flags(&self, mode: u32) -> u32 {
        mode | if self.session > 0 { FLAG_SESSION } else { 0 }
    }
}

/// The backend's map hasher: keys are already SipHash outputs (advlock_key), so one multiply
/// mixes enough; std's SipHash was a visible share of an uncontended acquire.
#[derive(Default)]
pub(super) struct KeyHasher(u64);

impl core::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_i64(&mut self, n: i64) {
        self.write_u64(n as u64);
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64);
    }
}

pub(super) type Holds = HashMap<(i64, u32), Hold, core::hash::BuildHasherDefault<KeyHasher>>;

thread_local! {
    /// (key, FLAG_SHARED or 0) -> hold. Backends are single-threaded; callbacks never run
    /// while this is borrowed (no PostgreSQL call inside a borrow can end a transaction).
    static HOLDS: RefCell<Holds> = RefCell::new(Holds::default());
    static CALLBACKS: Cell<bool> = const { Cell::new(false) };
    static LAST_SWEEP: Cell<i64> = const { Cell::new(i64::MIN / 2) };
}

/// Rate limit for the full-table sweep: true at most once per second per backend.
pub(super) fn sweep_due() -> bool {
    const INTERVAL_US: i64 = 1_000_000;
    let now = backend::now();
    LAST_SWEEP.with(|last| {
        if now - last.get() < INTERVAL_US {
            return false;
        }
        last.set(now);
        true
    })
}

/// The label of an `(ns, id)` target, "ns:id", written into `buf` and clipped to LABEL_BYTES at
/// a character boundary of the server encoding: (its length, the length of the ns part). (0, 0)
/// for a bare key. Allocates nothing: it runs on every labelled acquisition.
pub fn label_text(target: &Target, buf: &mut [u8; LABEL_BYTES + 8]) -> (usize, usize) {
    let mut digits = [0u8; 20];
    match &target.label {
        Some((ns, id)) => {
            let id_bytes: &[u8] = match id {
                Id::Text(text) => text.as_bytes(),
                Id::Int(n) => keys::decimal(*n, &mut digits),
            };
            (compose(ns.as_bytes(), id_bytes, buf), ns.as_bytes().len())
        }
        None => (0, 0),
    }
}

/// After a successful acquisition: record (or re-count) the label of an `(ns, id)` lock.
/// Never fails and never waits; a no-op without preload or for bare keys.
pub fn acquired(target: &Target, scope: Scope, mode: Mode) {
    if target.label.is_some() {
        record(target, scope, mode);
    }
}

/// After `advlock_try_with_token` acquired (and `acquired` ran): the hold shows its token. A
/// bare key gets an entry without a label, so that every token holder shows its token.
pub fn token_issued(target: &Target, scope: Scope, mode: Mode, token: i64) {
    let Some(table) = table() else { return };
    if target.label.is_none() {
        record(target, scope, mode);
    }
    HOLDS.with(|holds| {
        let Ok(holds) = holds.try_borrow() else {
            return;
        };
        if let Some(hold) = holds.get(&(target.key, mode_flag(mode))) {
            if hold.slot != NIL {
                table.set_token(hold.slot, token);
            }
        }
    });
}

fn record(target: &Target, scope: Scope, mode: Mode) {
    let Some(table) = table() else { return };
    register_callbacks();
    let mode = mode_flag(mode);
    HOLDS.with(|holds| {
        let Ok(mut holds) = holds.try_borrow_mut() else {
            return;
        };
        let hold = holds.entry((target.key, mode)).or_insert_with(|| Hold {
            slot: NIL,
            xact: 0,
            session: 0,
            since: backend::now(),
        });
        let had_session = hold.session > 0;
        match scope {
            Scope::Xact => hold.xact += 1,
            Scope::Session => hold.session += 1,
        }
        if hold.slot != NIL {
            if !had_session && hold.session > 0 {
                table.set_flags(hold.slot, hold.flags(mode));
            }
            return;
        }
        let (since, flags) = (hold.since, hold.flags(mode));
        let mut slot = table.pop_free();
        if slot.is_none() && sweep_due() {
            // Full: return what this backend no longer holds and what vanished backends left
            // behind, then try once more. Both scans are O(entries), so at most once a second.
            prune(&table, &mut holds, |_| true);
            table.reclaim_dead();
            slot = table.pop_free();
        }
        let Some(index) = slot else {
            table.header.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut buf = [0u8; LABEL_BYTES + 8];
        let (len, ns_len) = label_text(target, &mut buf);
        table.fill(index, target.key, flags, since, &buf[..len], ns_len);
        if let Some(hold) = holds.get_mut(&(target.key, mode)) {
            hold.slot = index;
        }
    });
}

/// After `advlock_unlock` released one session hold.
pub fn released_session(key: i64, mode: Mode) {
    let Some(table) = table() else { return };
    let mode = mode_flag(mode);
    HOLDS.with(|holds| {
        let Ok(mut holds) = holds.try_borrow_mut() else {
            return;
        };
        let Some(hold) = holds.get_mut(&(key, mode)) else {
            return;
        };
        hold.session = hold.session.saturating_sub(1);
        if hold.session > 0 {
            return;
        }
        if hold.xact > 0 && lockmgr::held_by_me(key, mode_of(mode)) {
            if hold.slot != NIL {
                table.set_flags(hold.slot, hold.flags(mode));
            }
            return;
        }
        if hold.slot != NIL {
            table.free(hold.slot);
        }
        holds.remove(&(key, mode));
    });
}

/// Drops every hold for which `consider` is true and whose lock this backend no longer holds.
pub(super) fn prune(table: &Table, holds: &mut Holds, consider: impl Fn(&Hold) -> bool) {
    holds.retain(|&(key, mode), hold| {
        if !consider(hold) || lockmgr::held_by_me(key, mode_of(mode)) {
            return true;
        }
        if hold.slot != NIL {
            table.free(hold.slot);
        }
        false
    });
}

/// Top-level transaction end, after the lock manager released transaction-level locks.
pub(super) fn end_of_transaction(table: &Table, holds: &mut Holds) {
    holds.retain(|&(key, mode), hold| {
        let was_session_only = hold.xact == 0;
        hold.xact = 0;
        if hold.session > 0 && lockmgr::held_by_me(key, mode_of(mode)) {
            if !was_session_only && hold.slot != NIL {
                table.set_flags(hold.slot, hold.flags(mode));
            }
            return true;
        }
        if hold.slot != NIL {
            table.free(hold.slot);
        }
        false
    });
}

pub(super) fn register_callbacks() {
    CALLBACKS.with(|done| {
        if done.get() {
            return;
        }
        // SAFETY: registration allocates in TopMemoryContext / the exit-callback array; done
        // once per backend, from a function running inside a transaction.
        unsafe {
            pg_sys::RegisterResourceReleaseCallback(
                Some(on_resource_release),
                core::ptr::null_mut(),
            );
            pg_sys::before_shmem_exit(Some(on_exit), pg_sys::Datum::from(0));
        }
        done.set(true);
    });
}

#[pg_guard]
unsafe extern "C-unwind" fn on_resource_release(
    phase: pg_sys::ResourceReleasePhase::Type,
    is_commit: bool,
    is_top_level: bool,
    _arg: *mut core::ffi::c_void,
) {
    if phase != pg_sys::ResourceReleasePhase::RESOURCE_RELEASE_AFTER_LOCKS {
        return;
    }
    let Some(table) = table() else { return };
    HOLDS.with(|holds| {
        let Ok(mut holds) = holds.try_borrow_mut() else {
            return;
        };
        if holds.is_empty() {
            return;
        }
        if is_top_level {
            // SAFETY: reads backend-local globals; during ResourceOwnerRelease,
            // CurrentResourceOwner is the owner being released.
            let top =
                unsafe { pg_sys::CurrentResourceOwner == pg_sys::TopTransactionResourceOwner };
            if top {
                end_of_transaction(&table, &mut holds);
            }
        } else if !is_commit {
            // A subtransaction aborted: its transaction-level locks are gone now.
            prune(&table, &mut holds, |hold| hold.xact > 0);
        }
    });
}

#[pg_guard]
unsafe extern "C-unwind" fn on_exit(_code: i32, _arg: pg_sys::Datum) {
    let Some(table) = table() else { return };
    HOLDS.with(|holds| {
        let Ok(mut holds) = holds.try_borrow_mut() else {
            return;
        };
        for (_, hold) in holds.drain() {
            if hold.slot != NIL {
                table.free(hold.slot);
            }
        }
    });
}
