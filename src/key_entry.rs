//! Hand-written fmgr (version-1) entry points of the three `advlock_key` functions, under the
//! symbol names pgrx generated for 0.2.0. The fast path reads in-line `text` arguments in place
//! and hashes them, calling no PostgreSQL function that could raise; every other case (NULL,
//! empty namespace, toasted value, encoding conversion) goes to a `#[pg_guard]`ed function that
//! runs the checked code in `keys` and raises exactly as before.
use crate::keys::{self, advlock_key_bytes};
use crate::server_text::{self, ServerText};
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::FromDatum;

static V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };

/// Argument `n` as (value, isnull).
///
/// # Safety
/// `fcinfo` is the call's FunctionCallInfo and the function takes more than `n` arguments.
unsafe fn arg(fcinfo: pg_sys::FunctionCallInfo, n: usize) -> (pg_sys::Datum, bool) {
    // SAFETY: see the contract; args has nargs entries.
    unsafe {
        let a = &(*fcinfo).args.as_slice((*fcinfo).nargs as usize)[n];
        (a.value, a.isnull)
    }
}

/// The bytes of an in-line, uncompressed `text` datum, read in place (what
/// pg_detoast_datum_packed would return, without calling it); None otherwise.
///
/// # Safety
/// `datum` is a non-null `text` datum valid for this call.
unsafe fn in_line_text<'a>(datum: pg_sys::Datum) -> Option<&'a [u8]> {
    use pgrx::varlena::{varatt_is_1b, varatt_is_1b_e, varatt_is_4b_u, varlena_to_byte_slice};
    // SAFETY: see the contract; only the header is inspected before the payload is sliced.
    unsafe {
        let raw = datum.cast_mut_ptr::<pg_sys::varlena>();
        let in_place = (varatt_is_1b(raw) && !varatt_is_1b_e(raw)) || varatt_is_4b_u(raw);
        in_place.then(|| varlena_to_byte_slice(raw))
    }
}

/// A namespace or id that hashes as is: its bytes are already the UTF-8 the key spec hashes.
fn hashable_as_is(bytes: &[u8]) -> bool {
    bytes.is_ascii() || !server_text::needs_conversion()
}

/// # Safety
/// Called by the function manager with a 2-argument `(text, text)` call.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn advlock_key_text_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: the SQL signature is (text, text); non-null datums are valid text for this call.
    unsafe {
        let ((ns, ns_null), (id, id_null)) = (arg(fcinfo, 0), arg(fcinfo, 1));
        if !ns_null && !id_null {
            if let (Some(ns), Some(id)) = (in_line_text(ns), in_line_text(id)) {
                if !ns.is_empty() && hashable_as_is(ns) && hashable_as_is(id) {
                    return pg_sys::Datum::from(advlock_key_bytes(ns, id));
                }
            }
        }
        checked_text(fcinfo)
    }
}

/// # Safety
/// Called by the function manager with a 2-argument `(text, bigint)` call.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn advlock_key_int_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: the SQL signature is (text, bigint); bigint is passed by value on 64-bit servers.
    unsafe {
        let ((ns, ns_null), (id, id_null)) = (arg(fcinfo, 0), arg(fcinfo, 1));
        if !ns_null && !id_null {
            if let Some(ns) = in_line_text(ns) {
                if !ns.is_empty() && hashable_as_is(ns) {
                    let mut digits = [0u8; 20];
                    let id = keys::decimal(id.value() as i64, &mut digits);
                    return pg_sys::Datum::from(advlock_key_bytes(ns, id));
                }
            }
        }
        checked_int(fcinfo)
    }
}

/// # Safety
/// Called by the function manager with a 1-argument `(text)` call.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn advlock_key_ns_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: the SQL signature is (text).
    unsafe {
        let (ns, ns_null) = arg(fcinfo, 0);
        if !ns_null {
            if let Some(ns) = in_line_text(ns) {
                if !ns.is_empty() && hashable_as_is(ns) {
                    return pg_sys::Datum::from(advlock_key_bytes(ns, b""));
                }
            }
        }
        checked_ns(fcinfo)
    }
}

/// The checked paths: detoasting, conversion and errors happen under pgrx's guard.
#[pg_guard]
unsafe extern "C-unwind" fn checked_text(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: as in advlock_key_text_wrapper.
    let key = unsafe {
        let ((ns, ns_null), (id, id_null)) = (arg(fcinfo, 0), arg(fcinfo, 1));
        keys::advlock_key_text(
            ServerText::from_datum(ns, ns_null),
            ServerText::from_datum(id, id_null),
        )
    };
    pg_sys::Datum::from(key)
}

#[pg_guard]
unsafe extern "C-unwind" fn checked_int(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: as in advlock_key_int_wrapper.
    let key = unsafe {
        let ((ns, ns_null), (id, id_null)) = (arg(fcinfo, 0), arg(fcinfo, 1));
        keys::advlock_key_int(
            ServerText::from_datum(ns, ns_null),
            (!id_null).then(|| id.value() as i64),
        )
    };
    pg_sys::Datum::from(key)
}

#[pg_guard]
unsafe extern "C-unwind" fn checked_ns(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: as in advlock_key_ns_wrapper.
    let key = unsafe {
        let (ns, ns_null) = arg(fcinfo, 0);
        keys::advlock_key_ns(ServerText::from_datum(ns, ns_null))
    };
    pg_sys::Datum::from(key)
}

#[unsafe(no_mangle)]
pub extern "C" fn pg_finfo_advlock_key_text_wrapper() -> &'static pg_sys::Pg_finfo_record {
    &V1
}

#[unsafe(no_mangle)]
pub extern "C" fn pg_finfo_advlock_key_int_wrapper() -> &'static pg_sys::Pg_finfo_record {
    &V1
}

#[unsafe(no_mangle)]
pub extern "C" fn pg_finfo_advlock_key_ns_wrapper() -> &'static pg_sys::Pg_finfo_record {
    &V1
}
