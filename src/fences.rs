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
//! An error the fast path's upsert raises (a missing privilege on `advlock_fences`, say) comes
//! back through pgrx's guard, rebuilt: message, SQLSTATE, DETAIL and HINT kept, CONTEXT
//! dropped, and a Rust backtrace appended to the DETAIL when the server runs with
//! RUST_BACKTRACE set. A transaction that cannot write is therefore sent to the checked path
//! before the upsert, so that its error is PostgreSQL's own.
//!
//! The statement text names every object schema-qualified (the extension's schema, looked up
//! from the called function) and its operators as OPERATOR(pg_catalog.x): a hostile search_path
//! reaches nothing (pg_test/reliability/test_security.py). The plan is kept per function OID, so
//! an extension dropped and created again in the same session gets a plan of its own; PostgreSQL's
//! plan cache revalidates it when the table changes.
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::ffi::{CStr, CString};

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

/// The kept plan of `function`'s upsert, prepared on its first call in this backend.
///
/// # Safety
/// Between SPI_connect and SPI_finish; `function` is the called form of `advlock_fence`.
unsafe fn plan(function: pg_sys::Oid, form: Form) -> pg_sys::SPIPlanPtr {
    if let Some(plan) =
        PREPARED.with_borrow(|p| p.iter().find(|p| p.function == function).map(|p| p.plan))
    {
        return plan;
    }
    // SAFETY: see the contract; SPI_prepare raises on a statement that does not parse or names
    // a missing object (it returns NULL only for a NULL text or without SPI_connect), and
    // SPI_keepplan moves the plan it made out of SPI's procedure context, for the backend's life.
    let plan = unsafe {
        let text =
            CString::new(form.statement(&quoted_schema_of(function))).expect("no NUL in SQL");
        let types = form.argtypes();
        let plan =
            pg_sys::SPI_prepare(text.as_ptr(), types.len() as i32, types.as_ptr().cast_mut());
        pg_sys::SPI_keepplan(plan);
        plan
    };
    PREPARED.with_borrow_mut(|p| {
        p.push(Prepared {
            function,
            plan,
            checked: pg_sys::InvalidOid,
        })
    });
    plan
}

/// `advlock_fence` in `form`, called by the function manager (`fmgr`, without pgrx's guard):
/// the fast path under the guard, then, when it did not pass the token, the call of the PL/pgSQL
/// made here, outside the guard -- so that what the PL/pgSQL raises (LK001: a SQLSTATE pgrx
/// would turn into XX000 on its way through a guard) reaches PostgreSQL as raised.
///
/// # Safety
/// `fcinfo` is this call's, of the SQL function declared below for `form`.
pub(crate) unsafe fn fence(fcinfo: pg_sys::FunctionCallInfo, form: Form) -> pg_sys::Datum {
    // SAFETY: see the contract; fence_fast returns NULL or a call block it prepared for this
    // call. This frame holds nothing with a destructor, so the PL/pgSQL's ERROR may leave it by
    // longjmp, as it leaves any C function's.
    unsafe { call_or_pass(fcinfo, fence_fast(fcinfo, form), pg_sys::Datum::from(0)) }
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

/// The fast path of `advlock_fence` in `form`, under pgrx's guard: NULL when it passed the
/// token, else the call of `advlock_fence_checked` with the same arguments, prepared.
///
/// # Safety
/// As for [`fence`].
#[pg_guard]
unsafe extern "C-unwind" fn fence_fast(
    fcinfo: pg_sys::FunctionCallInfo,
    form: Form,
) -> pg_sys::FunctionCallInfo {
    // SAFETY: see the contract: the arguments are those of the form's signature; a non-null ns is
    // a text datum, the token an int8 (by value).
    unsafe {
        let function = (*(*fcinfo).flinfo).fn_oid;
        let n = form.argtypes().len();
        let args = (*fcinfo).args.as_slice(n);
        // A transaction that cannot write goes straight to the checked path, whose upsert
        // raises PostgreSQL's own error there: run through SPI under pgrx's guard, that error
        // would come back rebuilt (with a Rust backtrace in its DETAIL when the server runs
        // with RUST_BACKTRACE set).
        let passable = !crate::lockmgr::in_read_only_transaction()
            && !crate::lockmgr::in_recovery()
            && args.iter().all(|a| !a.isnull)
            && args[n - 1].value.value() as i64 >= 1
            && (form == Form::Key
                || pgrx::varlena::varsize_any_exhdr(
                    args[0].value.cast_mut_ptr::<pg_sys::varlena>(),
                ) > 0);
        if passable {
            let mut values = [pg_sys::Datum::from(0); 3];
            for (v, a) in values.iter_mut().zip(args) {
                *v = a.value;
            }
            // SPI_connect raises rather than fail; a result other than one row inserted or
            // updated goes to the checked path, which decides.
            pg_sys::SPI_connect();
            let plan = plan(function, form);
            let rc =
                pg_sys::SPI_execute_plan(plan, values.as_mut_ptr(), core::ptr::null(), false, 0);
            let wrote = rc == pg_sys::SPI_OK_INSERT as i32 && pg_sys::SPI_processed == 1;
            pg_sys::SPI_finish();
            if wrote {
                return core::ptr::null_mut();
            }
        }
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
        prepare_call(fcinfo, checked, n)
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
