//! Leases across restarts and failover (docs/reliability.md, "Leases across restarts and
//! failover"): the resource manager that replays `lease_wal`'s records into the lease table, the
//! end of recovery, the snapshot worker and the state file of a clean shutdown. The layer above
//! the table (`preload::leases`) and its records (`lease_wal`), which know nothing of replay.
//!
//! Snapshots of every held lease: replay starts at the last checkpoint's redo pointer and
//! extensions get no checkpoint hook, so whoever first finds `GetRedoRecPtr()` past the last
//! snapshot logs a new one: a lease operation (right after its own record) or the snapshot
//! worker (`advlock lease snapshots`, a background worker of the primary that looks every
//! second). Replay then never needs a record older than the redo pointer. The remaining
//! window, stated in the docs: a checkpoint that starts and completes within that second
//! with no lease operation after its start, followed by a crash before the worker's next
//! look, loses the leases granted before it (a spread checkpoint takes minutes; the window
//! is for `CHECKPOINT` and nearly idle ones). Same after a start from the state file: until
//! the first snapshot, about a second after the start.
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
//! `gucs::DEFAULT_RMGR_ID`): custom ids are 128-255, 128 is for experiments only, and two
//! extensions registering the same id stop the server at start. The id is written into every
//! record, so a standby must use the primary's value (a base backup copies postgresql.conf).
use crate::backend;
use crate::preload::lease_wal::{self, Reader, END, GRANT, RENEW, SNAPSHOT, XLR_INFO_MASK};
use crate::preload::leases::{self as table, Image};
use crate::preload::shmem;
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::time::Duration;

const RMGR_NAME: &core::ffi::CStr = c"advlock_leases";

/// The state file, relative to the data directory (the postmaster's working directory).
const STATE_FILE: &str = "pg_stat/advlock_leases.state";
const STATE_MAGIC: &[u8; 8] = b"advlkL01";

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
    lease_wal::set_registered(id);
}

/// The lease table's shared memory (`preload::leases`), with what a start adds to it: created
/// by the postmaster at server start, the table gets the leases a clean shutdown saved, and the
/// postmaster saves them again at its own exit.
pub const SEGMENT: shmem::Segment = shmem::Segment {
    size: table::shmem_size,
    attach: attach_table,
};

/// # Safety
/// Only from `shmem::shmem_startup`, under AddinShmemInitLock (as `preload::leases::shmem_attach`).
unsafe fn attach_table() {
    // SAFETY: see the function contract.
    let created_by_postmaster = unsafe { table::shmem_attach() };
    // SAFETY: a plain global, set once at process start.
    if !unsafe { pg_sys::IsUnderPostmaster } {
        // The postmaster, creating the table at start or after a crash: the leases it saved
        // when it last exited normally (a crash that kills it or its children saves none:
        // recovery replays them from the WAL), and the saving at its own exit.
        if created_by_postmaster {
            read_state_file();
        }
        // SAFETY: registers a callback of this library for the postmaster's exit.
        unsafe { pg_sys::on_shmem_exit(Some(save_at_exit), pg_sys::Datum::from(0)) };
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn save_at_exit(code: i32, _arg: pg_sys::Datum) {
    write_state_file(code);
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
            lease_wal::flush(end);
        }
    }
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
            let images = table::decode_images(data)?;
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
    if code != 0 || !lease_wal::registered() {
        return;
    }
    let Some(bytes) = table::snapshot_unlocked(|images| table::encode_images(images)) else {
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
    let images = bytes
        .strip_prefix(STATE_MAGIC)
        .and_then(table::decode_images);
    let Some(images) = images else {
        log!("advlock: ignored \"{STATE_FILE}\": not a lease table this version can read");
        return;
    };
    let now = backend::now();
    table::restore_unlocked(&images, now);
}
