//! The lease table in the WAL: how leases, terms and semaphore slots survive a crash, a restart
//! and the promotion of a standby (docs/reliability.md, "Leases across restarts and failover").
//!
//! advlock registers a custom WAL resource manager (`RegisterCustomRmgr`, PostgreSQL 15+, only
//! possible while preloading — leases need the preload anyway) and logs, under the lease table's
//! lock so that the WAL order is the order of the changes:
//! * a grant (the whole lease: id, database, key, slots, role, TTL, times, label, candidate),
//!   as durable as a commit before `advlock_lease` / `advlock_campaign` returns its id
//!   (`flush_grant`: flushed and on the synchronous standbys, or, with `synchronous_commit =
//!   off`, flushed by the WAL writer soon after);
//! * a renewal (new TTL and expiry), not flushed and marked unimportant (it moves no checkpoint
//!   and no `archive_timeout` segment switch): a lost renewal only means a lease is pushed to
//!   now + TTL from an older expiry at the end of recovery. Logged so that a hot standby's table
//!   shows what the primary's does (etcd does not log keepalives; its followers show no leases);
//! * an end: a release, a resignation, a lease found expired by the server (flushed by the WAL
//!   writer within `wal_writer_delay`, not waited for: an end lost in a crash leaves a lease that
//!   ends at its pushed expiry, the safe direction);
//! * a snapshot of every held lease. Replay starts at the last checkpoint's redo pointer and
//!   extensions get no checkpoint hook, so whoever first finds `GetRedoRecPtr()` past the last
//!   snapshot logs a new one: a lease operation (right after its own record) or the snapshot
//!   worker (`advlock lease snapshots`, a background worker of the primary that looks every
//!   second). Replay then never needs a record older than the redo pointer. The remaining
//!   window, stated in the docs: a checkpoint that starts and completes within that second
//!   with no lease operation after its start, followed by a crash before the worker's next
//!   look, loses the leases granted before it (a spread checkpoint takes minutes; the window
//!   is for `CHECKPOINT` and nearly idle ones). Same after a start from the state file: until
//!   the first snapshot, about a second after the start.
//!
//! The startup process replays the records into the shared table (`redo`), on a hot standby
//! continuously. At the end of redo (`cleanup`: crash recovery, promotion, point-in-time
//! recovery) every lease the table holds is live again with its expiry pushed to at least now +
//! its TTL, as etcd's `lessor.Promote` does; after an archive recovery (a promotion) no lease is
//! granted until `advlock.lease_lock_delay` has passed (`Table::promote`).
//!
//! A clean shutdown replays nothing at the next start (its checkpoint is the redo pointer), so the
//! postmaster writes the table to `pg_stat/advlock_leases.state` when it exits normally and reads
//! (then removes) it when it creates the table at the next start; the file holds a snapshot
//! record's bytes, one format for both.
//!
//! The resource manager id is the setting `advlock.wal_rmgr_id` (postmaster context, default
//! `DEFAULT_RMGR_ID`): custom ids are 128-255, 128 is for experiments only, and two extensions
//! registering the same id stop the server at start. The id is written into every record, so a
//! standby must use the primary's value (a base backup copies postgresql.conf).
use crate::backend;
use crate::preload::leases::{self as table, Image};
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// The id used unless `advlock.wal_rmgr_id` says otherwise: within the custom range (128-255),
/// not RM_EXPERIMENTAL_ID (128), and not one listed on PostgreSQL's wiki page
/// "CustomWALResourceManagers" as of this writing for another extension.
pub const DEFAULT_RMGR_ID: i32 = 171;
const RMGR_NAME: &core::ffi::CStr = c"advlock_leases";

/// Record kinds, in the high bits of xl_info (the low ones are PostgreSQL's: XLR_INFO_MASK).
const GRANT: u8 = 0x00;
const RENEW: u8 = 0x10;
const END: u8 = 0x20;
const SNAPSHOT: u8 = 0x30;
const XLR_INFO_MASK: u8 = 0x0F;
/// access/xlog.h: a record not important for durability (no checkpoint or segment switch for it).
const XLOG_MARK_UNIMPORTANT: u8 = 0x02;
/// The state file, relative to the data directory (the postmaster's working directory).
const STATE_FILE: &str = "pg_stat/advlock_leases.state";
const STATE_MAGIC: &[u8; 8] = b"advlkL01";

/// The id registered in `_PG_init` (0: not registered, nothing is logged).
static RMGR_ID: AtomicU8 = AtomicU8::new(0);

/// The resource manager's description, for RegisterCustomRmgr (which copies it into the rmgr
/// table; its name pointer must stay valid: a static string).
struct Rmgr(pg_sys::RmgrData);

// SAFETY: read-only after initialisation (only PostgreSQL reads it, through the pointer given to
// RegisterCustomRmgr); its only pointer is to a static C string.
unsafe impl Sync for Rmgr {}

static RMGR: Rmgr = Rmgr(pg_sys::RmgrData {
    rm_name: RMGR_NAME.as_ptr(),
    rm_redo: Some(redo),
    rm_desc: Some(desc),
    rm_identify: Some(identify),
    rm_startup: None,
    rm_cleanup: Some(cleanup),
    rm_mask: None,
    rm_decode: None,
});

/// From `_PG_init` while preloading: register the resource manager under `id`.
pub fn register(id: i32) {
    let id = u8::try_from(id).expect("advlock.wal_rmgr_id is limited to 129..255");
    // SAFETY: called while shared_preload_libraries is processed (RegisterCustomRmgr raises
    // otherwise, and when the id is taken: the server does not start, with that message). It
    // only reads RMGR (the pointer is `*mut` in 15's declaration, `*const` after).
    unsafe { pg_sys::RegisterCustomRmgr(id, (&raw const RMGR.0).cast_mut()) };
    RMGR_ID.store(id, Ordering::Relaxed);
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

/// Logs a grant; the caller flushes the returned position (`flush`) outside the table's lock.
pub fn log_grant(image: &Image) -> pg_sys::XLogRecPtr {
    let mut out = Vec::with_capacity(128);
    image.encode(&mut out);
    insert(GRANT, &out, false)
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
    RMGR_ID.load(Ordering::Relaxed) != 0 && last_snapshot_end <= unsafe { pg_sys::GetRedoRecPtr() }
}

/// Logs a snapshot of `images` (every held lease); returns the record's end. Unimportant, like
/// a renewal: on an otherwise idle server it must not make the next checkpoint necessary (whose
/// redo pointer would make the next snapshot necessary, and so on).
/// Handed to the WAL writer like an end (`log_end`); the snapshot worker flushes its own.
pub fn log_snapshot<'a>(images: impl Iterator<Item = Image<'a>>) -> pg_sys::XLogRecPtr {
    let end = insert(SNAPSHOT, &encode_snapshot(images), true);
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

/// How often the snapshot worker looks at the redo pointer.
const SNAPSHOT_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// From `_PG_init` while preloading: the background worker that logs a snapshot within
/// `SNAPSHOT_CHECK_INTERVAL` of a checkpoint's start even when no lease operation runs (on a
/// primary: it starts when recovery has finished).
pub fn register_snapshot_worker() {
    BackgroundWorkerBuilder::new("advlock lease snapshots")
        .set_type("advlock lease snapshots")
        .set_library("advlock")
        .set_function("advlock_lease_snapshot_worker")
        .enable_shmem_access(None)
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(SNAPSHOT_CHECK_INTERVAL))
        .load();
}

/// The snapshot worker's main loop: no database, no transaction, only the lease table.
#[pg_guard]
#[no_mangle]
pub extern "C-unwind" fn advlock_lease_snapshot_worker(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    while BackgroundWorker::wait_latch(Some(SNAPSHOT_CHECK_INTERVAL)) {
        // Flushed at once (outside the lock): the point of this worker is that the snapshot is
        // on disk soon after a checkpoint began, whatever else the server does.
        if let Some(end) = table::with_table(true, |t| t.snapshot_if_due()).flatten() {
            flush(end);
        }
    }
}

fn encode_snapshot<'a>(images: impl Iterator<Item = Image<'a>>) -> Vec<u8> {
    let mut out = vec![0u8; 4];
    let mut count = 0u32;
    for image in images {
        image.encode(&mut out);
        count += 1;
    }
    out[..4].copy_from_slice(&count.to_le_bytes());
    out
}

/// Waits until the WAL up to `lsn` (a position this process inserted) is on disk.
fn flush(lsn: pg_sys::XLogRecPtr) {
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

    fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

fn decode_snapshot(bytes: &[u8]) -> Option<Vec<Image<'_>>> {
    let mut r = Reader::new(bytes);
    let count = r.u32()?;
    let mut images = Vec::with_capacity(count.min(1 << 20) as usize);
    for _ in 0..count {
        images.push(Image::decode(&mut r)?);
    }
    r.is_empty().then_some(images)
}

/// Applies one record to the table. None: the record is malformed.
fn apply(info: u8, data: &[u8], end: pg_sys::XLogRecPtr) -> Option<()> {
    let mut r = Reader::new(data);
    match info {
        GRANT => {
            let image = Image::decode(&mut r)?;
            table::with_table(true, |t| t.restore(&image)).flatten()?;
        }
        RENEW => {
            let (database, id, ttl_ms) = (r.u32()?, r.i64()?, r.i32()?);
            let (renewed_at, expires_at) = (r.i64()?, r.i64()?);
            table::with_table(true, |t| {
                t.restore_renewal(database, id, ttl_ms, renewed_at, expires_at)
            });
        }
        END => {
            let (database, id) = (r.u32()?, r.i64()?);
            table::with_table(true, |t| t.restore_end(database, id));
        }
        SNAPSHOT => {
            let images = decode_snapshot(data)?;
            table::with_table(true, |t| t.restore_snapshot(&images, end)).flatten()?;
            return Some(());
        }
        _ => return None,
    }
    r.is_empty().then_some(())
}

fn record_parts(record: *mut pg_sys::XLogReaderState) -> (u8, &'static [u8], pg_sys::XLogRecPtr) {
    // SAFETY: the reader state PostgreSQL hands to redo and desc: `record` is its decoded
    // current record (XLogRecGetInfo / XLogRecGetData / XLogRecGetDataLen); the data stays valid
    // while the callback runs, which is as long as the slice is used.
    unsafe {
        let decoded = (*record).record;
        let info = (*decoded).header.xl_info & !XLR_INFO_MASK;
        let len = (*decoded).main_data_len as usize;
        let data = if len == 0 {
            &[][..]
        } else {
            core::slice::from_raw_parts((*decoded).main_data.cast::<u8>(), len)
        };
        (info, data, (*record).EndRecPtr)
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn redo(record: *mut pg_sys::XLogReaderState) {
    let (info, data, end) = record_parts(record);
    if apply(info, data, end).is_none() {
        // A record this version cannot read (or a table too small for it): stop recovery
        // rather than come up with leases missing, which would let a contender in early.
        error!(
            "advlock: cannot replay lease record {} ({} bytes): malformed, or advlock.max_leases is smaller than on the primary",
            identify_info(info),
            data.len()
        );
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn desc(buf: pg_sys::StringInfo, record: *mut pg_sys::XLogReaderState) {
    let (info, data, _) = record_parts(record);
    let mut r = Reader::new(data);
    let text = match info {
        GRANT => Image::decode(&mut r).map_or_else(String::new, |i| {
            format!(
                "db {} key {} lease {} ttl {} ms",
                i.database, i.key, i.id, i.ttl_ms
            )
        }),
        RENEW | END => match (r.u32(), r.i64()) {
            (Some(db), Some(id)) => format!("db {db} lease {id}"),
            _ => String::new(),
        },
        SNAPSHOT => format!("{} leases", r.u32().unwrap_or(0)),
        _ => String::new(),
    };
    let text = std::ffi::CString::new(text).unwrap_or_default();
    // SAFETY: appends a NUL-terminated string to the StringInfo PostgreSQL passed in.
    unsafe { pg_sys::appendStringInfoString(buf, text.as_ptr()) };
}

fn identify_info(info: u8) -> &'static str {
    match info {
        GRANT => "GRANT",
        RENEW => "RENEW",
        END => "END",
        SNAPSHOT => "SNAPSHOT",
        _ => "UNKNOWN",
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn identify(info: u8) -> *const core::ffi::c_char {
    match info & !XLR_INFO_MASK {
        GRANT => c"GRANT".as_ptr(),
        RENEW => c"RENEW".as_ptr(),
        END => c"END".as_ptr(),
        SNAPSHOT => c"SNAPSHOT".as_ptr(),
        _ => core::ptr::null(),
    }
}

/// The end of redo: crash recovery, a promotion, the end of a point-in-time recovery.
#[pg_guard]
unsafe extern "C-unwind" fn cleanup() {
    // SAFETY: a global of the startup process, set before redo began.
    let promoted = unsafe { pg_sys::ArchiveRecoveryRequested };
    let delay_ms = if promoted {
        crate::gucs::LEASE_LOCK_DELAY_MS.get()
    } else {
        0
    };
    let now = backend::now();
    table::with_table(true, |t| t.promote(now, backend::ms_to_us(delay_ms)));
}

/// At the postmaster's exit: writes the table to the state file when it exits normally (`code`
/// 0: any `pg_ctl stop` mode), for the next start, which replays no WAL after a clean shutdown
/// (after an immediate one, recovery replays the WAL onto it). No lock: every other process of
/// the server has exited.
pub fn write_state_file(code: i32) {
    if code != 0 || RMGR_ID.load(Ordering::Relaxed) == 0 {
        return;
    }
    let Some(bytes) = table::snapshot_unlocked(|images| encode_snapshot(images)) else {
        return;
    };
    let tmp = format!("{STATE_FILE}.tmp");
    let written = (|| -> std::io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(STATE_MAGIC)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, STATE_FILE)
    })();
    if let Err(e) = written {
        log!("advlock: could not write the lease table to \"{STATE_FILE}\": {e}");
        let _ = std::fs::remove_file(&tmp);
    }
}

/// In the postmaster, when the table is created at server start: the leases of the state file a
/// clean shutdown wrote (then the file is removed: a later crash restarts from the WAL alone).
/// Every lease read is live again until at least now + its TTL.
pub fn read_state_file() {
    let Ok(bytes) = std::fs::read(STATE_FILE) else {
        return;
    };
    let _ = std::fs::remove_file(STATE_FILE);
    let images = bytes.strip_prefix(STATE_MAGIC).and_then(decode_snapshot);
    let Some(images) = images else {
        log!("advlock: ignored \"{STATE_FILE}\": not a lease table this version can read");
        return;
    };
    let now = backend::now();
    table::restore_unlocked(&images, now);
}
