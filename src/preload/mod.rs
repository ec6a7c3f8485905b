//! What exists only when advlock is in `shared_preload_libraries`: lock labels (`labels`),
//! per-namespace statistics (`stats`) and the lease table (`leases`), all kept in shared memory
//! that `shmem` requests and attaches. The dependency runs one way: `shmem` is the mechanism and
//! knows nothing of the features; each feature describes its segment (`shmem::Segment`), and
//! `init` hands them to `shmem` when the library is preloaded. Without preload nothing is
//! requested, recording is a no-op, and the statistics and lease functions raise 55000.
pub mod labels;
pub mod lease_recovery;
pub mod lease_wal;
pub mod leases;
pub mod shmem;
pub mod stats;

/// From `_PG_init`: true when the library is being preloaded; then reserve and attach the shared
/// memory of every feature.
pub fn init() -> bool {
    let preloading = shmem::preloading();
    if preloading {
        shmem::install_hooks(&[labels::SEGMENT, stats::SEGMENT, lease_recovery::SEGMENT]);
        lease_recovery::register(crate::gucs::WAL_RMGR_ID.get());
        lease_recovery::register_snapshot_worker();
    }
    preloading
}
