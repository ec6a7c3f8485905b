//! Fences' hot path (docs/fences.md; bench case 11): `advlock_fence` and the guard of the table
//! `advlock_fences`, in Rust, around the PL/pgSQL of sql/fence.sql, which the SQL edition runs as
//! it is. Their entry points are in `fmgr`; they are declared at the end of this file.
//!
//! * `advlock_fence` (three key forms): when every argument is present, the namespace non-empty
//!   and the token positive, runs the fence's upsert -- the statement of the PL/pgSQL
//!   `advlock_fence_checked`, word for word -- through a plan SPI keeps for the backend's life,
//!   as the caller (no SECURITY DEFINER: the caller's privileges on `advlock_fences` decide), and
//!   is done when it wrote the row. Anything else -- a missing or non-positive argument, or an
//!   upsert that wrote nothing, a refusal, the row now locked by this transaction -- goes to
//!   `advlock_fence_checked` with the same arguments: it checks them, runs the same upsert again
//!   and raises what sql/messages.toml says (22004, 22023, LK001 with its DETAIL, which names the
//!   token that passed). So every message stays in the shared PL/pgSQL, and the Rust decides
//!   nothing the PL/pgSQL would decide otherwise. The PL/pgSQL alone costs a second executor
//!   state and its expressions per call: 1.5x the single-row upsert, where the target is 1.3x.
//! * `advlock_fence_update_check`: the BEFORE UPDATE row trigger of `advlock_fences`, without a
//!   WHEN clause (PostgreSQL parses and plans a trigger's WHEN anew in every statement, which
//!   cost more than the rest of the guard): passes an update that keeps the key and does not
//!   lower the token, and hands any other to the PL/pgSQL guard `advlock_fence_guard`, which
//!   raises (LK001, 42501).
//!
//! What the fast path's upsert raises -- a missing privilege on `advlock_fences`, a statement
//! timeout, cancel or deadlock while it waits for the row's lock, a serialization failure, a
//! transaction that cannot write -- is PostgreSQL's own error, as a C function's is: message,
//! SQLSTATE, DETAIL, HINT and CONTEXT (`SQL statement "INSERT INTO ..."`). The upsert runs outside
//! pgrx's guard, through SPI functions declared here (`unguarded`): pgrx's bindings catch an
//! ERROR and raise it again rebuilt, CONTEXT lost and, when the server runs with RUST_BACKTRACE
//! set, a Rust backtrace appended to the DETAIL. Only the decision and the lookups around the
//! upsert run under the guard.
//!
//! The statement text names every object schema-qualified (the extension's schema, looked up
//! from the called function) and its operators as OPERATOR(pg_catalog.x): a hostile search_path
//! reaches nothing (pg_test/reliability/test_security.py). The plan is kept per function OID, so
//! an extension dropped and created again in the same session gets a plan of its own; PostgreSQL's
//! plan cache revalidates it when the table changes.
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};

/// The three forms of `advlock_fence`: their arguments, in SQL order, end with the token.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Form {
    /// `(key bigint, token bigint)`
    Key,
    /// `(ns text, id text, token bigint)`
    Text,
    /// `(ns text, id bigint, token bigint)`
    Int,
}

impl Form {
    fn argtypes(self) -> &'static [pg_sys::Oid] {
        match self {
            Form::Key => &[pg_sys::INT8OID, pg_sys::INT8OID],
            Form::Text => &[pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::INT8OID],
            Form::Int => &[pg_sys::TEXTOID, pg_sys::INT8OID, pg_sys::INT8OID],
        }
    }

    /// The upsert of `advlock_fence_checked` (sql/templates/fence.sql), its arguments as $1...
    fn statement(self, schema: &str) -> String {
        let values = match self {
            Form::Key => "(key, token)\n     VALUES ($1, $2)".to_string(),
            Form::Text => format!("(key, token, ns, id)\n     VALUES ({schema}.advlock_key($1, $2), $3, $1, $2)"),
            Form::Int => format!(
                "(key, token, ns, id)\n     VALUES ({schema}.advlock_key($1, $2), $3, $1, $2::pg_catalog.text)"
            ),
        };
        format!(
            "INSERT INTO {schema}.advlock_fences AS f {values}\n\
             ON CONFLICT ON CONSTRAINT advlock_fences_pkey DO UPDATE\n       \
             SET token = excluded.token, passed_at = excluded.passed_at, passed_by = excluded.passed_by\n     \
             WHERE f.token OPERATOR(pg_catalog.<=) excluded.token"
        )
    }
}

/// What a form of `advlock_fence` keeps for the backend's life: the kept plan of its upsert and,
/// once needed, its PL/pgSQL `advlock_fence_checked`.
struct Prepared {
    function: pg_sys::Oid,
    plan: pg_sys::SPIPlanPtr,
    checked: pg_sys::Oid,
}

thread_local! {
    static PREPARED: RefCell<Vec<Prepared>> = const { RefCell::new(Vec::new()) };
}

/// The name of the schema of `function` (the extension's), quoted for SQL.
///
/// # Safety
/// In a transaction; `function` exists.
unsafe fn quoted_schema_of(function: pg_sys::Oid) -> String {
    // SAFETY: see the contract; both lookups return palloc'd strings (or NULL for a schema
    // dropped meanwhile, which cannot happen while its function runs).
    unsafe {
        let name = pg_sys::get_namespace_name(pg_sys::get_func_namespace(function));
        CStr::from_ptr(pg_sys::quote_identifier(name))
            .to_string_lossy()
            .into_owned()
    }
}

/// The OID of `name(argtypes)` in the schema of `function`.
///
/// # Safety
/// In a transaction; `function` exists.
unsafe fn sibling(function: pg_sys::Oid, name: &CStr, argtypes: &[pg_sys::Oid]) -> pg_sys::Oid {
    // SAFETY: see the contract; the name list is built of palloc'd String nodes, as the parser
    // builds one; LookupFuncName raises when the function is missing (missing_ok false).
    unsafe {
        let schema = pg_sys::get_namespace_name(pg_sys::get_func_namespace(function));
        let mut names = pg_sys::lappend(core::ptr::null_mut(), pg_sys::makeString(schema).cast());
        names = pg_sys::lappend(
            names,
            pg_sys::makeString(pg_sys::pstrdup(name.as_ptr())).cast(),
        );
        pg_sys::LookupFuncName(names, argtypes.len() as i32, argtypes.as_ptr(), false)
    }
}

/// `advlock_fence` in `form`, called by the function manager (`fmgr`, without pgrx's guard):
/// the decision under the guard ([`fence_fast`]), the upsert outside it ([`upsert`]), then, when
/// the upsert did not pass the token, the call of the PL/pgSQL made here, outside the guard too
/// -- so that what either raises (a missing privilege, a statement timeout, a deadlock; LK001: a
/// SQLSTATE pgrx would turn into XX000 on its way through a guard) reaches PostgreSQL as raised,
/// CONTEXT included.
///
/// # Safety
/// `fcinfo` is this call's, of the SQL function declared below for `form`.
pub(crate) unsafe fn fence(fcinfo: pg_sys::FunctionCallInfo, form: Form) -> pg_sys::Datum {
    let mut statement = Upsert::new(form);
    // SAFETY: see the contract; fence_fast fills `statement` only for a call it passes on to the
    // upsert, and fence_checked returns a call block it prepared for this call. This frame holds
    // nothing with a destructor (`statement` is plain data), so an ERROR of the upsert or of the
    // PL/pgSQL may leave it by longjmp, as it leaves any C function's.
    unsafe {
        if fence_fast(fcinfo, form, &mut statement) && upsert(&statement) {
            return pg_sys::Datum::from(0);
        }
        call_or_pass(fcinfo, fence_checked(fcinfo, form), pg_sys::Datum::from(0))
    }
}

/// The fast path's upsert, as [`fence_fast`] hands it to [`upsert`]: plain data, nothing to drop.
#[derive(Clone, Copy)]
struct Upsert {
    form: Form,
    /// The called form of `advlock_fence`, whose plan this is.
    function: pg_sys::Oid,
    /// The kept plan; NULL on the function's first pass in this backend, `text` then.
    plan: pg_sys::SPIPlanPtr,
    /// The statement to prepare when `plan` is NULL: palloc'd, NUL-terminated.
    text: *const c_char,
    /// The arguments, `form.argtypes()` of them.
    values: [pg_sys::Datum; 3],
}

impl Upsert {
    fn new(form: Form) -> Self {
        Upsert {
            form,
            function: pg_sys::InvalidOid,
            plan: core::ptr::null_mut(),
            text: core::ptr::null(),
            values: [pg_sys::Datum::from(0); 3],
        }
    }
}

/// Runs `statement` through SPI: true when it inserted or updated the fence's row. Calls SPI
/// through [`unguarded`], not pgrx's bindings, and holds nothing with a destructor: a PostgreSQL
/// ERROR (a missing privilege, a statement timeout, a cancel or a deadlock while it waits for
/// the row's lock, a serialization failure, a read-only transaction) leaves this frame, and
/// `fence`'s, by longjmp, untouched: message, SQLSTATE, DETAIL, HINT, and the CONTEXT SPI adds
/// (`SQL statement "INSERT INTO ..."`), as a C function's would.
///
/// # Safety
/// In a transaction; `statement` was filled by [`fence_fast`] for this call.
unsafe fn upsert(statement: &Upsert) -> bool {
    let types = statement.form.argtypes();
    let mut values = statement.values;
    // SAFETY (every call below): these are PostgreSQL's own functions, called as C calls them.
    // An ERROR leaves by siglongjmp to the nearest PG_TRY or to the top of the transaction
    // through frames that hold no Rust destructor (this one: `Upsert`, `values`, `types`,
    // `plan` are plain data and references), so skipping them loses nothing; what the
    // connection left open is cleaned by PostgreSQL at abort (AtEOXact_SPI, or AtEOSubXact_SPI
    // for a subtransaction's: SPI's stack and its procedure memory), and the memory contexts are
    // PostgreSQL's to reset. Nothing here can panic: no allocation, no borrow, no indexing.
    unsafe {
        // SAFETY: see above; SPI_connect raises rather than fail (PostgreSQL 10 and later).
        unguarded::SPI_connect();
        let mut plan = statement.plan;
        if plan.is_null() {
            // SAFETY: see above; connected, `text` is the form's statement with
            // `types.len()` parameters of `types`; SPI_prepare raises on a statement that does
            // not parse or names a missing object, or a schema the caller may not use, and
            // waits for the table's lock (it returns NULL only for a NULL text or without
            // SPI_connect). SPI_keepplan moves the plan out of SPI's procedure memory, for the
            // backend's life; it is remembered before it runs, so an ERROR below leaks nothing.
            plan = unguarded::SPI_prepare(
                statement.text,
                types.len() as c_int,
                types.as_ptr().cast_mut(),
            );
            unguarded::SPI_keepplan(plan);
            remember(statement.function, plan);
        }
        // SAFETY: see above; `values` holds the plan's `types.len()` parameters, none NULL
        // (fence_fast checked), valid for this call; the plan revalidates itself (the table's
        // lock and a changed table are PostgreSQL's plan cache's concern).
        let rc =
            unguarded::SPI_execute_plan(plan, values.as_mut_ptr(), core::ptr::null(), false, 0);
        // SPI_processed: a plain global, read as C reads it.
        let wrote = rc == pg_sys::SPI_OK_INSERT as c_int && pg_sys::SPI_processed == 1;
        // SAFETY: see above; connected by the SPI_connect above.
        unguarded::SPI_finish();
        wrote
    }
}

/// Keeps `plan`, just prepared for `function`, for the backend's life. Under pgrx's guard: it
/// only allocates.
#[pg_guard]
extern "C-unwind" fn remember(function: pg_sys::Oid, plan: pg_sys::SPIPlanPtr) {
    PREPARED.with_borrow_mut(|p| {
        p.push(Prepared {
            function,
            plan,
            checked: pg_sys::InvalidOid,
        })
    });
}

/// PostgreSQL's SPI functions that [`upsert`] calls, declared here as PostgreSQL's headers
/// (executor/spi.h) declare them: the `pg_sys` functions of the same names are pgrx's bindings,
/// Rust wrappers (pgrx-macros' `#[pg_guard]` on bindgen's extern block) that run each call in
/// `pg_guard_ffi_boundary` -- a sigsetjmp that catches an ERROR, copies it into a Rust panic and
/// lets pgrx raise it again, rebuilt: CONTEXT lost, and a Rust backtrace in the DETAIL when the
/// server runs with RUST_BACKTRACE set. These link to PostgreSQL's symbols directly, with no
/// frame of pgrx's between: an ERROR leaves by longjmp as from any C caller.
mod unguarded {
    use core::ffi::{c_char, c_int, c_long};
    use pgrx::pg_sys::{Datum, Oid, SPIPlanPtr};

    unsafe extern "C-unwind" {
        pub(super) fn SPI_connect() -> c_int;
        pub(super) fn SPI_prepare(
            src: *const c_char,
            nargs: c_int,
            argtypes: *mut Oid,
        ) -> SPIPlanPtr;
        pub(super) fn SPI_keepplan(plan: SPIPlanPtr) -> c_int;
        pub(super) fn SPI_execute_plan(
            plan: SPIPlanPtr,
            values: *mut Datum,
            nulls: *const c_char,
            read_only: bool,
            tcount: c_long,
        ) -> c_int;
        pub(super) fn SPI_finish() -> c_int;
    }
}

/// Returns `passed` when `call` is NULL; else calls it (the PL/pgSQL a guarded part prepared) and
/// returns its result, its NULL flag set in `fcinfo`. Calls no pgrx binding: a PostgreSQL ERROR
/// leaves this frame by longjmp, untouched.
///
/// # Safety
/// `fcinfo` is the current call's; `call` is NULL or a call block from `prepare_call`.
unsafe fn call_or_pass(
    fcinfo: pg_sys::FunctionCallInfo,
    call: pg_sys::FunctionCallInfo,
    passed: pg_sys::Datum,
) -> pg_sys::Datum {
    if call.is_null() {
        return passed;
    }
    // SAFETY: see the contract: prepare_call set flinfo (by fmgr_info, so fn_addr is set), the
    // arguments and the context.
    unsafe {
        let address = (*(*call).flinfo).fn_addr.expect("fmgr_info sets fn_addr");
        let result = address(call);
        (*fcinfo).isnull = (*call).isnull;
        result
    }
}

/// The decision of `advlock_fence` in `form`, under pgrx's guard: true, with `statement` filled,
/// when the call goes to the upsert (every argument present, the namespace non-empty, the token
/// positive); false when it goes straight to `advlock_fence_checked`, which raises. Prepares
/// nothing and calls no SPI: the kept plan when there is one, else the statement's text.
///
/// A transaction that cannot write (read-only, or on a standby) goes to the upsert too: its
/// executor raises PostgreSQL's own 25006 there, as the PL/pgSQL's would after the same checks.
///
/// # Safety
/// As for [`fence`]; `statement` is writable.
#[pg_guard]
unsafe extern "C-unwind" fn fence_fast(
    fcinfo: pg_sys::FunctionCallInfo,
    form: Form,
    statement: *mut Upsert,
) -> bool {
    // SAFETY: see the contract: the arguments are those of the form's signature; a non-null ns is
    // a text datum, the token an int8 (by value).
    unsafe {
        let function = (*(*fcinfo).flinfo).fn_oid;
        let n = form.argtypes().len();
        let args = (*fcinfo).args.as_slice(n);
        let passable = args.iter().all(|a| !a.isnull)
            && args[n - 1].value.value() as i64 >= 1
            && (form == Form::Key
                || pgrx::varlena::varsize_any_exhdr(
                    args[0].value.cast_mut_ptr::<pg_sys::varlena>(),
                ) > 0);
        if !passable {
            return false;
        }
        let statement = &mut *statement;
        statement.function = function;
        for (v, a) in statement.values.iter_mut().zip(args) {
            *v = a.value;
        }
        statement.plan = PREPARED
            .with_borrow(|p| p.iter().find(|p| p.function == function).map(|p| p.plan))
            .unwrap_or(core::ptr::null_mut());
        if statement.plan.is_null() {
            // In the caller's memory context, for this call.
            let text =
                CString::new(form.statement(&quoted_schema_of(function))).expect("no NUL in SQL");
            statement.text = pg_sys::pstrdup(text.as_ptr());
        }
        true
    }
}

/// The call of `advlock_fence_checked` with the arguments of this call of `advlock_fence` in
/// `form`, prepared under pgrx's guard for `call_or_pass`.
///
/// # Safety
/// As for [`fence`].
#[pg_guard]
unsafe extern "C-unwind" fn fence_checked(
    fcinfo: pg_sys::FunctionCallInfo,
    form: Form,
) -> pg_sys::FunctionCallInfo {
    // SAFETY: see the contract; the called function exists, so does its sibling.
    unsafe {
        let function = (*(*fcinfo).flinfo).fn_oid;
        let checked = PREPARED.with_borrow(|p| {
            p.iter()
                .find(|p| p.function == function)
                .map_or(pg_sys::InvalidOid, |p| p.checked)
        });
        let checked = if checked == pg_sys::InvalidOid {
            let oid = sibling(function, c"advlock_fence_checked", form.argtypes());
            PREPARED.with_borrow_mut(|p| {
                if let Some(p) = p.iter_mut().find(|p| p.function == function) {
                    p.checked = oid;
                }
            });
            oid
        } else {
            checked
        };
        prepare_call(fcinfo, checked, form.argtypes().len())
    }
}

/// A call block for `function` with the first `nargs` arguments and the context of `fcinfo` (a
/// trigger's TriggerData), in the current memory context, for `call_or_pass`.
///
/// # Safety
/// `fcinfo` is the current call's and has at least `nargs` arguments; `function` takes them, and
/// the context, as the current function does.
unsafe fn prepare_call(
    fcinfo: pg_sys::FunctionCallInfo,
    function: pg_sys::Oid,
    nargs: usize,
) -> pg_sys::FunctionCallInfo {
    // SAFETY: see the contract. The FmgrInfo and the argument block live in the current memory
    // context, for this call.
    unsafe {
        let flinfo =
            pg_sys::palloc0(core::mem::size_of::<pg_sys::FmgrInfo>()).cast::<pg_sys::FmgrInfo>();
        pg_sys::fmgr_info(function, flinfo);
        let size = core::mem::size_of::<pg_sys::FunctionCallInfoBaseData>()
            + nargs * core::mem::size_of::<pg_sys::NullableDatum>();
        let call = pg_sys::palloc0(size).cast::<pg_sys::FunctionCallInfoBaseData>();
        (*call).flinfo = flinfo;
        (*call).context = (*fcinfo).context;
        (*call).fncollation = (*fcinfo).fncollation;
        (*call).nargs = nargs as i16;
        let from = (*fcinfo).args.as_slice(nargs);
        let to = (*call).args.as_mut_slice(nargs);
        to.copy_from_slice(from);
        call
    }
}

/// `advlock_fence_update_check()`, the BEFORE UPDATE row trigger of `advlock_fences`, called by
/// the function manager (`fmgr`, without pgrx's guard): the check under the guard, then, for an
/// update it does not pass, the PL/pgSQL guard's call made here, as in [`fence`].
///
/// # Safety
/// `fcinfo` is this call's.
pub(crate) unsafe fn update_check(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    let mut passed = pg_sys::Datum::from(0);
    // SAFETY: see the contract; check_update returns NULL (and the new tuple in `passed`) or a
    // call block it prepared; this frame holds nothing with a destructor.
    unsafe {
        let call = check_update(fcinfo, &mut passed);
        call_or_pass(fcinfo, call, passed)
    }
}

/// The check of [`update_check`] under pgrx's guard: NULL, and the new tuple in `passed`, for an
/// update that keeps the key and does not lower the token; else the prepared call of the PL/pgSQL
/// guard `advlock_fence_guard`, which says what is wrong (and refuses a call that is not a
/// trigger's).
///
/// # Safety
/// `fcinfo` is this call's.
#[pg_guard]
unsafe extern "C-unwind" fn check_update(
    fcinfo: pg_sys::FunctionCallInfo,
    passed: *mut pg_sys::Datum,
) -> pg_sys::FunctionCallInfo {
    // SAFETY: see the contract; a TriggerData context of a BEFORE UPDATE row trigger has both
    // tuples, of the relation's descriptor; SPI_fnumber and SPI_getbinval need no SPI connection.
    unsafe {
        let context = (*fcinfo).context;
        let event =
            pg_sys::TRIGGER_EVENT_UPDATE | pg_sys::TRIGGER_EVENT_ROW | pg_sys::TRIGGER_EVENT_BEFORE;
        let mask = pg_sys::TRIGGER_EVENT_OPMASK
            | pg_sys::TRIGGER_EVENT_ROW
            | pg_sys::TRIGGER_EVENT_TIMINGMASK;
        if !context.is_null() && pgrx::is_a(context, pg_sys::NodeTag::T_TriggerData) {
            let data = context.cast::<pg_sys::TriggerData>();
            if ((*data).tg_event & mask) == event {
                let desc = (*(*data).tg_relation).rd_att;
                let (old, new) = ((*data).tg_trigtuple, (*data).tg_newtuple);
                let (key, token) = (
                    pg_sys::SPI_fnumber(desc, c"key".as_ptr()),
                    pg_sys::SPI_fnumber(desc, c"token".as_ptr()),
                );
                let column = |tuple: pg_sys::HeapTuple, n: i32| {
                    let mut isnull = true;
                    let value = if n > 0 {
                        pg_sys::SPI_getbinval(tuple, desc, n, &mut isnull)
                    } else {
                        pg_sys::Datum::from(0)
                    };
                    (!isnull).then_some(value.value() as i64)
                };
                if let (Some(old_key), Some(new_key), Some(old_token), Some(new_token)) = (
                    column(old, key),
                    column(new, key),
                    column(old, token),
                    column(new, token),
                ) {
                    if new_key == old_key && new_token >= old_token {
                        *passed = pg_sys::Datum::from(new);
                        return core::ptr::null_mut();
                    }
                }
            }
        }
        let guard = sibling((*(*fcinfo).flinfo).fn_oid, c"advlock_fence_guard", &[]);
        prepare_call(fcinfo, guard, 0)
    }
}

pgrx::extension_sql!(
    r#"
-- advlock_fence's hot path and the guard of advlock_fences (src/fences.rs): Rust around the
-- PL/pgSQL of sql/fence.sql, which raises every refusal.
CREATE FUNCTION @extschema@.advlock_fence(key pg_catalog.int8, token pg_catalog.int8)
RETURNS void VOLATILE LANGUAGE c AS 'MODULE_PATHNAME', 'advlock_fence_key';
CREATE FUNCTION @extschema@.advlock_fence(ns pg_catalog.text, id pg_catalog.text, token pg_catalog.int8)
RETURNS void VOLATILE LANGUAGE c AS 'MODULE_PATHNAME', 'advlock_fence_text';
CREATE FUNCTION @extschema@.advlock_fence(ns pg_catalog.text, id pg_catalog.int8, token pg_catalog.int8)
RETURNS void VOLATILE LANGUAGE c AS 'MODULE_PATHNAME', 'advlock_fence_int';
CREATE FUNCTION @extschema@.advlock_fence_update_check()
RETURNS trigger VOLATILE LANGUAGE c AS 'MODULE_PATHNAME', 'advlock_fence_update_check';
"#,
    name = "fence_hot_path",
    requires = ["fence"],
);
