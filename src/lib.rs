//! advlock: PostgreSQL advisory locks that are safe and observable from plain SQL.
//!
//! Each concept lives in its own module; this file only declares them and wires `_PG_init`.
use pgrx::prelude::*;

mod acquisition;
mod activity;
mod backend;
mod diagnostics;
mod election;
mod errors;
mod fences;
mod fencing;
mod fmgr;
mod gucs;
mod holding;
mod idle_lock_timeout;
mod key_set;
mod keys;
mod leases;
mod lock_mode;
mod lock_request;
mod lock_table;
mod lockmgr;
mod metrics;
mod preload;
mod provisional;
mod server_text;
mod snapshot_free_wait;
mod wait_events;

#[cfg(any(test, feature = "pg_test"))]
mod tests;

pub use keys::advlock_key_bytes;

::pgrx::pg_module_magic!(name, version);

// A COMMENT for every function and view, once all of them exist.
pgrx::extension_sql_file!("../sql/comments.sql", name = "comments", finalize);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // Labels and statistics live in shared memory, which only a preloaded library can get.
    // The settings first: the shared-memory sizes read the capacity settings.
    gucs::init(preload::shmem::preloading());
    lockmgr::install_log_hook();
    idle_lock_timeout::init();
    preload::init();
}

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    /// The suite runs with advlock preloaded, so labels and statistics are exercised in
    /// shared memory; ADVLOCK_PGRX_PRELOAD=off runs it without (each test asserts what its
    /// configuration should do).
    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        match std::env::var("ADVLOCK_PGRX_PRELOAD").as_deref() {
            Ok("off") => vec![],
            _ => vec!["shared_preload_libraries = 'advlock'"],
        }
    }
}
