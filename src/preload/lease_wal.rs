//! The lease table's WAL records (the lower half of leases across restarts and failover;
//! `lease_recovery` registers the resource manager and replays them): how a change is logged and
//! when it is durable. Under the lease table's lock, so that the WAL order is the order of the
//! changes, `preload::leases` logs:
//! * a grant (the whole lease, `Image` encoded by the table: id, database, key, slots, role, TTL,
//!   times, label, candidate), flushed before `advlock_lease` / `advlock_campaign` returns its id
//!   (`flush_grant`);
//! * a renewal (new TTL and expiry), not flushed and marked unimportant (it moves no checkpoint
//!   and no `archive_timeout` segment switch): a lost renewal only means a lease is pushed to
//!   now + TTL from an older expiry at the end of recovery. Logged so that a hot standby's table
//!   shows what the primary's does (etcd does not log keepalives; its followers show no leases);
//! * an end: a release, a resignation, a lease found expired by the server (flushed by the WAL
//!   writer within `wal_writer_delay`, not waited for: an end lost in a crash leaves a lease that
//!   ends at its pushed expiry, the safe direction);
//! * a snapshot of every held lease, whenever a checkpoint started since the last one
//!   (`snapshot_due`; why, and the remaining window: `lease_recovery`).
use pgrx::pg_sys;
use std::sync::atomic::{AtomicU8, Ordering};

/// Record kinds, in the high bits of xl_info (the low ones are PostgreSQL's: XLR_INFO_MASK).
pub const GRANT: u8 = 0x00;
pub const RENEW: u8 = 0x10;
pub const END: u8 = 0x20;
pub const SNAPSHOT: u8 = 0x30;
pub const XLR_INFO_MASK: u8 = 0x0F;
/// access/xlog.h: a record not important for durability (no checkpoint or segment switch for it).
const XLOG_MARK_UNIMPORTANT: u8 = 0x02;

/// The id registered in `_PG_init` (0: not registered, nothing is logged).
static RMGR_ID: AtomicU8 = AtomicU8::new(0);

/// From `lease_recovery::register`, once the resource manager is registered under `id`: from
/// then on this process logs.
pub fn set_registered(id: u8) {
    RMGR_ID.store(id, Ordering::Relaxed);
}

/// Whether the resource manager is registered (preloaded on 15+): otherwise nothing is logged.
pub fn registered() -> bool {
    RMGR_ID.load(Ordering::Relaxed) != 0
}

/// Whether this process may log lease changes: the resource manager is registered and the
/// server is not in recovery (a hot standby's table changes only by replay).
pub fn is_replica() -> bool {
    // SAFETY: reads shared recovery state; callable in any backend.
    unsafe { pg_sys::RecoveryInProgress() }
}

fn insert(info: u8, data: &[u8], unimportant: bool) -> pg_sys::XLogRecPtr {
    let rmid = RMGR_ID.load(Ordering::Relaxed);
    if rmid == 0 {
        return 0;
    }
    // SAFETY: the begin/register/insert sequence of xloginsert.c, with nothing between them that
    // can raise; `data` outlives XLogInsert, which copies it into the WAL. Only called on a
    // primary (the table's writers check `is_replica` first).
    unsafe {
        pg_sys::XLogBeginInsert();
        register_data(data);
        if unimportant {
            pg_sys::XLogSetRecordFlags(XLOG_MARK_UNIMPORTANT);
        }
        pg_sys::XLogInsert(rmid, info)
    }
}

/// `XLogRegisterData(data, len)`, whose signature changed: an int length on 15, a const void
/// pointer on 18.
///
/// # Safety
/// Between XLogBeginInsert and XLogInsert; `data` must outlive the XLogInsert call.
unsafe fn register_data(data: &[u8]) {
    // SAFETY: see the function contract; XLogRegisterData only reads `data`.
    unsafe {
        #[cfg(feature = "pg15")]
        pg_sys::XLogRegisterData(data.as_ptr().cast_mut().cast(), data.len() as i32);
        #[cfg(any(feature = "pg16", feature = "pg17"))]
        pg_sys::XLogRegisterData(data.as_ptr().cast_mut().cast(), data.len() as u32);
        #[cfg(not(any(feature = "pg15", feature = "pg16", feature = "pg17")))]
        pg_sys::XLogRegisterData(data.as_ptr().cast(), data.len() as u32);
    }
}

/// Logs a grant (the lease's encoded image); the caller flushes the returned position
/// (`flush_grant`) outside the table's lock.
pub fn log_grant(image: &[u8]) -> pg_sys::XLogRecPtr {
    insert(GRANT, image, false)
}

/// Logs a renewal of lease `id` of `database`.
pub fn log_renewal(database: u32, id: i64, ttl_ms: i32, renewed_at: i64, expires_at: i64) {
    let mut out = Vec::with_capacity(32);
    out.extend_from_slice(&database.to_le_bytes());
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&ttl_ms.to_le_bytes());
    out.extend_from_slice(&renewed_at.to_le_bytes());
    out.extend_from_slice(&expires_at.to_le_bytes());
    insert(RENEW, &out, true);
}

/// Logs the end of lease `id` of `database` (released, resigned or found expired). Not flushed
/// by the caller, but handed to the WAL writer as an asynchronous commit is: on disk within
/// `wal_writer_delay` (a crash before that brings the lease back until its pushed expiry).
pub fn log_end(database: u32, id: i64) {
    let mut out = Vec::with_capacity(12);
    out.extend_from_slice(&database.to_le_bytes());
    out.extend_from_slice(&id.to_le_bytes());
    let end = insert(END, &out, false);
    if end != 0 {
        // SAFETY: records a WAL position for the WAL writer to flush (a spinlock and a latch).
        unsafe { pg_sys::XLogSetAsyncXactLSN(end) };
    }
}

/// Whether a checkpoint started after the last snapshot ended at `last_snapshot_end`: then the
/// next crash recovery would begin after it, and a new snapshot is due.
pub fn snapshot_due(last_snapshot_end: pg_sys::XLogRecPtr) -> bool {
    // SAFETY: GetRedoRecPtr reads the shared redo pointer under its spinlock.
    registered() && last_snapshot_end <= unsafe { pg_sys::GetRedoRecPtr() }
}

/// Logs a snapshot, `images` (every held lease, encoded); returns the record's end. Unimportant, like
/// a renewal: on an otherwise idle server it must not make the next checkpoint necessary (whose
/// redo pointer would make the next snapshot necessary, and so on).
/// Handed to the WAL writer like an end (`log_end`); the snapshot worker flushes its own.
pub fn log_snapshot(images: &[u8]) -> pg_sys::XLogRecPtr {
    let end = insert(SNAPSHOT, images, true);
    if end != 0 {
        // SAFETY: records a WAL position for the WAL writer to flush (a spinlock and a latch).
        unsafe { pg_sys::XLogSetAsyncXactLSN(end) };
    }
    end
}

/// Where the next WAL record will start: a position after every checkpoint's redo pointer so far.
pub fn insert_position() -> pg_sys::XLogRecPtr {
    // SAFETY: reads the shared insert position under its spinlock.
    unsafe { pg_sys::GetXLogInsertRecPtr() }
}

/// Waits until the WAL up to `lsn` (a position this process inserted) is on disk.
pub fn flush(lsn: pg_sys::XLogRecPtr) {
    // SAFETY: XLogFlush of a position already inserted; a no-op when it is flushed already.
    unsafe { pg_sys::XLogFlush(lsn) };
}

/// Makes a grant's record as durable as a commit before its id reaches the client, by the
/// session's `synchronous_commit`: flushed locally, and with `synchronous_standby_names` on the
/// synchronous standbys too (as PREPARE TRANSACTION waits for its record); with
/// `synchronous_commit = off`, handed to the WAL writer instead (on disk within
/// `wal_writer_delay`, the window PostgreSQL accepts for such commits).
pub fn flush_grant(lsn: pg_sys::XLogRecPtr) {
    if lsn == 0 {
        return;
    }
    // SAFETY: a backend-local GUC variable.
    let asynchronous = unsafe { pg_sys::synchronous_commit }
        == pg_sys::SyncCommitLevel::SYNCHRONOUS_COMMIT_OFF as core::ffi::c_int;
    if asynchronous {
        // SAFETY: records a WAL position for the WAL writer to flush (a spinlock and a latch).
        unsafe { pg_sys::XLogSetAsyncXactLSN(lsn) };
        return;
    }
    flush(lsn);
    // SAFETY: waits for the synchronous standbys to confirm `lsn` (a no-op without any); a
    // cancel ends that wait with a WARNING, as for a commit, and the lease stays granted.
    unsafe { pg_sys::SyncRepWaitForLSN(lsn, false) };
}

/// A record's bytes, read in the order they were written.
pub struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes }
    }

    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.bytes.len() < n {
            return None;
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Some(head)
    }

    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    pub fn i32(&mut self) -> Option<i32> {
        Some(i32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    pub fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}
