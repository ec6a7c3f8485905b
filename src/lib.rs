//! advlock: PostgreSQL advisory locks that are safe and observable from plain SQL.
//!
//! Each concept lives in its own module; this file only declares them and wires `_PG_init`.
use pgrx::prelude::*;

mod acquisition;
mod diagnostics;
mod errors;
mod gucs;
mod keys;
mod lock_request;
mod lockmgr;
mod server_text;

#[cfg(any(test, feature = "pg_test"))]
mod tests;

pub use keys::advlock_key_bytes;

::pgrx::pg_module_magic!(name, version);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    gucs::init();
}

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
