//! A `text` argument as raw bytes in the server encoding, converted to UTF-8 on demand.
//!
//! pgrx's `&str` panics on non-ASCII text in a non-UTF-8 database; advlock instead converts
//! with the server's own conversion routines so a key is the same in every database.
use core::ffi::{c_char, c_int, CStr};
use pgrx::callconv::{Arg, ArgAbi};
use pgrx::pg_sys;
use pgrx::FromDatum;
use std::borrow::Cow;

/// How much of a user-supplied string an error message shows.
const DISPLAY_CHARS: usize = 64;

#[derive(Clone, Copy)]
pub struct ServerText<'a> {
    bytes: &'a [u8],
}

impl<'a> ServerText<'a> {
    /// The raw bytes, in the database encoding.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The text as UTF-8. Borrowed (no allocation) in UTF-8 and SQL_ASCII databases, and for
    /// ASCII-only text in any encoding (every server encoding is an ASCII superset).
    pub fn to_utf8(self) -> Cow<'a, [u8]> {
        if self.bytes.is_ascii() || !needs_conversion() {
            return Cow::Borrowed(self.bytes);
        }
        // SAFETY: `bytes` is a detoasted text payload valid for this call; pg_server_to_any
        // returns either its input or a palloc'd NUL-terminated string in the current memory
        // context (text never contains NUL bytes, so strlen is the converted length).
        unsafe {
            let src = self.bytes.as_ptr() as *const c_char;
            let out = pg_sys::pg_server_to_any(
                src,
                self.bytes.len() as c_int,
                pg_sys::pg_enc::PG_UTF8 as c_int,
            );
            if core::ptr::eq(out, src) {
                Cow::Borrowed(self.bytes)
            } else {
                Cow::Owned(CStr::from_ptr(out).to_bytes().to_vec())
            }
        }
    }

    /// For messages: at most `DISPLAY_CHARS` characters (a 100 MB id must not become a 100 MB
    /// error). Messages go to the server in its own encoding, so outside UTF-8 (and SQL_ASCII,
    /// which passes bytes through) non-ASCII characters are shown as \uXXXX escapes.
    pub fn display(&self) -> String {
        let utf8 = self.to_utf8();
        let text = String::from_utf8_lossy(&utf8);
        let ascii_only = needs_conversion();
        let mut out = String::new();
        for (n, c) in text.chars().enumerate() {
            if n == DISPLAY_CHARS {
                out.push_str(&format!("... ({} bytes)", self.bytes.len()));
                break;
            }
            if ascii_only && !c.is_ascii() {
                out.push_str(&format!("\\u{:04X}", c as u32));
            } else {
                out.push(c);
            }
        }
        out
    }
}

/// A name from the catalog (a role name: NUL-terminated, in the server encoding) as text for a
/// message: converted to UTF-8 where it is valid in the database encoding (`Report` then shows
/// its non-ASCII characters as \uXXXX outside UTF-8), taken lossily where it is not (a name
/// created from a database of another encoding), never an error raised while building one.
pub fn catalog_name(name: &CStr) -> String {
    let bytes = name.to_bytes();
    if bytes.is_ascii() || !needs_conversion() {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    // SAFETY: reads `bytes.len()` bytes of `bytes`; noError = true: reports instead of raising.
    let valid = unsafe {
        pg_sys::pg_verify_mbstr(
            pg_sys::GetDatabaseEncoding(),
            bytes.as_ptr() as *const c_char,
            bytes.len() as c_int,
            true,
        )
    };
    if valid {
        String::from_utf8_lossy(&ServerText { bytes }.to_utf8()).into_owned()
    } else {
        String::from_utf8_lossy(bytes).into_owned()
    }
}

pub fn needs_conversion() -> bool {
    // SAFETY: reads the backend-local database encoding; always set inside a backend.
    let enc = unsafe { pg_sys::GetDatabaseEncoding() } as u32;
    enc != pg_sys::pg_enc::PG_UTF8 && enc != pg_sys::pg_enc::PG_SQL_ASCII
}

impl<'a> FromDatum for ServerText<'a> {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _: pg_sys::Oid,
    ) -> Option<Self> {
        if is_null || datum.is_null() {
            return None;
        }
        // SAFETY: the datum is a `text` (the SQL signature says so). A plain in-line value
        // (short or 4-byte header, neither compressed nor external) is read in place, as
        // pg_detoast_datum_packed would return it, without a guarded FFI call; anything else
        // is detoasted into the function's memory context, which outlives this call.
        unsafe {
            use pgrx::varlena::{varatt_is_1b, varatt_is_1b_e, varatt_is_4b_u};
            let raw = datum.cast_mut_ptr::<pg_sys::varlena>();
            let in_place = (varatt_is_1b(raw) && !varatt_is_1b_e(raw)) || varatt_is_4b_u(raw);
            let varlena = if in_place {
                raw
            } else {
                pg_sys::pg_detoast_datum_packed(raw)
            };
            Some(ServerText {
                bytes: pgrx::varlena::varlena_to_byte_slice(varlena),
            })
        }
    }
}

// Elements of a `text[]` argument (the multi-key functions' `ids`).
// SAFETY: array elements are never compressed or stored externally (construct_md_array
// flattens them), so the varlena can be read in place, possibly with a short header.
unsafe impl pgrx::datum::UnboxDatum for ServerText<'_> {
    type As<'src>
        = ServerText<'src>
    where
        Self: 'src;
    unsafe fn unbox<'src>(datum: pgrx::datum::Datum<'src>) -> ServerText<'src>
    where
        Self: 'src,
    {
        // SAFETY: see the impl; the array outlives the element borrow ('src).
        unsafe {
            ServerText {
                bytes: pgrx::varlena::varlena_to_byte_slice(
                    datum.sans_lifetime().cast_mut_ptr::<pg_sys::varlena>(),
                ),
            }
        }
    }
}

// SAFETY: the argument is declared `text` (impl_sql_translatable below, arg_only = "text"),
// which is what FromDatum for ServerText reads; the borrow lives as long as the call ('fcx).
unsafe impl<'fcx> ArgAbi<'fcx> for ServerText<'fcx> {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        // SAFETY: the caller (pgrx's fmgr glue) passes an argument of this function, a `text`
        // datum or NULL, valid for the call; NULL becomes None and the panic below.
        unsafe { arg.unbox_arg_using_from_datum() }
            .unwrap_or_else(|| panic!("argument {index} must not be null"))
    }
}

pgrx::pgrx_sql_entity_graph::impl_sql_translatable!(ServerText<'_>, arg_only = "text");

/// A `text` result from bytes already in the server encoding (e.g. a label copied from
/// shared memory by a backend of the same database): returned as is, without conversion.
pub struct ServerTextOut(pub Vec<u8>);

impl pgrx::IntoDatum for ServerTextOut {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        // text and bytea share the varlena layout; the bytes are valid in the server encoding.
        self.0.as_slice().into_datum()
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::TEXTOID
    }
}

// SAFETY: returns the datum built by into_datum (or NULL), as pgrx does for &str.
unsafe impl pgrx::callconv::BoxRet for ServerTextOut {
    unsafe fn box_into<'fcx>(
        self,
        fcinfo: &mut pgrx::callconv::FcInfo<'fcx>,
    ) -> pgrx::datum::Datum<'fcx> {
        match pgrx::IntoDatum::into_datum(self) {
            // SAFETY: a freshly palloc'd text datum, returned to the caller as is.
            Some(datum) => unsafe { fcinfo.return_raw_datum(datum) },
            None => fcinfo.return_null(),
        }
    }
}

pgrx::pgrx_sql_entity_graph::impl_sql_translatable!(ServerTextOut, "text");
