//! Fencing tokens: `advlock_try_with_token` acquires like `advlock_try_with_timeout` and returns
//! a number that grows with every acquisition, for the protected resource to store and compare
//! (`UPDATE … WHERE fence < :token`), so a holder that lost its lock without knowing cannot
//! overwrite the work of the next one.
//!
//! The source: token = (WAL insertion timeline << 47) | n, where n comes from the sequence
//! `advlock_token_seq` of the extension's schema.
//! * A sequence is WAL-logged 32 values ahead, so after a restart or a crash it resumes beyond
//!   every value it handed out — provided that WAL record is on disk before a value it covers
//!   reaches a client. nextval leaves that to the transaction's commit, which is too late for a
//!   token (the client acts on it before committing, or the transaction may abort), so when the
//!   call wrote WAL it is flushed here: one flush per 32 tokens.
//! * A promoted standby may have lost the old primary's last WAL with asynchronous replication,
//!   and its sequence may be behind. Promotion always starts a higher timeline, and the timeline
//!   sits above the counter: every token of the new timeline is larger than every token of the
//!   old one. 47 bits of counter last 44 years at 100,000 tokens a second; 16 bits of timeline
//!   allow 65,535 promotions.
//!
//! Tokens are per database, like advisory locks themselves (each database has its own copy of
//! the extension and of the sequence).
use crate::acquisition::acquire_one;
use crate::errors::Report;
use crate::lock_request::{key_forms, Request, Target};
use crate::lockmgr;
use crate::server_text::ServerText;
use pgrx::pg_sys;
use pgrx::pg_sys::errcodes::PgSqlErrorCode;
use pgrx::prelude::*;

const TRY_TOKEN: &str = "advlock_try_with_token";
const COUNTER_BITS: u32 = 47;
const MAX_TIMELINE: u32 = (1 << (63 - COUNTER_BITS)) - 1;

unsafe extern "C-unwind" {
    // commands/sequence.h (not in pgrx's bindings): nextval without the caller's privilege
    // check — the sequence is the extension's internal state, not the caller's.
    fn nextval_internal(relid: pg_sys::Oid, check_permissions: bool) -> i64;
}

/// The next token. `function` is the calling SQL function's OID: the sequence lives in its schema.
pub(crate) fn next_token(function: pg_sys::Oid) -> i64 {
    // SAFETY: syscache lookups and WAL position reads, inside a transaction.
    let (sequence, timeline, wal_before) = unsafe {
        let schema = pg_sys::get_func_namespace(function);
        (
            pg_sys::get_relname_relid(c"advlock_token_seq".as_ptr(), schema),
            pg_sys::GetWALInsertionTimeLine(),
            pg_sys::XactLastRecEnd,
        )
    };
    if sequence == pg_sys::InvalidOid {
        Report::new(
            PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
            "sequence advlock_token_seq of the advlock extension is missing",
        )
        .hint("Reinstall the extension: DROP EXTENSION advlock; CREATE EXTENSION advlock.")
        .raise();
    }
    if timeline > MAX_TIMELINE {
        Report::new(
            PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            format!("timeline {timeline} is beyond what fencing tokens can carry ({MAX_TIMELINE})"),
        )
        .raise();
    }
    // SAFETY: a sequence relation of this database; nextval_internal locks and WAL-logs it. Its
    // ERRORs (read-only, limit reached) cross the FFI boundary as pgrx expects; the closure
    // holds nothing with a destructor.
    let n = unsafe { pg_sys::ffi::pg_guard_ffi_boundary(|| nextval_internal(sequence, false)) };
    // SAFETY: XactLastRecEnd is this backend's end of its last WAL record in this transaction;
    // XLogFlush waits until WAL up to it is durable (a no-op when it already is).
    unsafe {
        let wal_after = pg_sys::XactLastRecEnd;
        if wal_after != wal_before {
            pg_sys::XLogFlush(wal_after);
        }
    }
    ((timeline as i64) << COUNTER_BITS) | n
}

/// Tokens come from a WAL-logged sequence: refused up front, before any lock is taken, where
/// nothing can be written. `function` names the caller in the error.
pub(crate) fn tokens_possible(function: &str) {
    let place = if lockmgr::in_recovery() {
        "on a hot standby"
    } else if lockmgr::in_read_only_transaction() {
        "in a read-only transaction"
    } else {
        return;
    };
    Report::new(
        PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
        format!("{function} cannot run {place}"),
    )
    .detail("A fencing token is drawn from a WAL-logged sequence, which needs a writable transaction on the primary.")
    .hint("Call it on the primary, outside read-only transactions (default_transaction_read_only = off).")
    .raise();
}

fn try_with_token(
    target: Target,
    timeout_ms: Option<i32>,
    scope: Option<ServerText>,
    mode: Option<ServerText>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<i64> {
    let Request {
        timeout_ms,
        scope,
        mode,
    } = Request::parse(TRY_TOKEN, timeout_ms, scope, mode);
    tokens_possible(TRY_TOKEN);
    if !acquire_one(TRY_TOKEN, &target, timeout_ms, scope, mode) {
        return None;
    }
    // SAFETY: fcinfo is this call's, with its FmgrInfo.
    let function = unsafe { (*(*fcinfo).flinfo).fn_oid };
    let token = next_token(function);
    crate::preload::labels::token_issued(&target, scope, mode, token);
    Some(token)
}

key_forms! {
    #[pg_extern(name = "advlock_try_with_token")]
    fn [try_with_token_key, try_with_token_text, try_with_token_int](
        timeout_ms: Option<i32>,
        scope: default!(Option<ServerText>, "'session'"),
        mode: default!(Option<ServerText>, "'exclusive'"),
        fcinfo: pg_sys::FunctionCallInfo,
    ) -> [Option<i64>]
    for TRY_TOKEN, |target| try_with_token( target, timeout_ms, scope, mode, fcinfo, )
}

pgrx::extension_sql!(
    r#"
-- The fencing-token counter (see src/fencing.rs). Only advlock_try_with_token advances it.
-- Its value is part of a dump (pg_extension_config_dump), so a restored database goes on
-- from where it was.
CREATE SEQUENCE @extschema@.advlock_token_seq MINVALUE 1 MAXVALUE 140737488355327 NO CYCLE;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.advlock_token_seq', '');
"#,
    name = "token_sequence",
    bootstrap
);

// Fences in the database (docs/fences.md): the PL/pgSQL of advlock_fence (advlock_fence_checked
// here), advlock_fence_reset and the guard, shared with the SQL edition (sql/fence.sql); the Rust
// advlock_fence and the guard trigger's function (src/fences.rs, "fence_hot_path"); then the
// table they write (sql/fence_table.sql).
pgrx::extension_sql_file!("../sql/fence.sql", name = "fence");
pgrx::extension_sql_file!(
    "../sql/fence_table.sql",
    name = "fence_table",
    requires = ["fence", "fence_hot_path"]
);
