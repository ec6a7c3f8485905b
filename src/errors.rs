//! Error reporting in PostgreSQL's style: SQLSTATE, a message naming the argument, a hint.
//! The helpers are #[track_caller], so an error's LOCATION is the line that asked for the check
//! (pgrx records the caller of `ErrorReport::new`), not this file.
use pgrx::pg_sys::errcodes::PgSqlErrorCode;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::PgLogLevel;

pub struct Report {
    inner: ErrorReport,
}

impl Report {
    #[track_caller]
    pub fn new(code: PgSqlErrorCode, message: impl Into<String>) -> Self {
        Report {
            inner: ErrorReport::new(code, for_server(message.into()), "advlock"),
        }
    }

    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.inner = self.inner.set_detail(for_server(detail.into()));
        self
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.inner = self.inner.set_hint(for_server(hint.into()));
        self
    }

    /// Raises the report as an ERROR: aborts the (sub)transaction, never returns.
    pub fn raise(self) -> ! {
        self.inner.report(PgLogLevel::ERROR);
        unreachable!("ereport(ERROR) returned")
    }

    pub fn warn(self) {
        self.inner.report(PgLogLevel::WARNING);
    }
}

/// A message, detail or hint as the server can carry it. PostgreSQL takes their bytes to be in
/// the database encoding and converts them to each client's: advlock's own wording is ASCII
/// (scripts/lint_ascii.py), readable in every encoding, but what a message quotes (a role name, an
/// argument) is Rust text, UTF-8. In a database of another encoding (EUC_JP, LATIN1, ...; not
/// SQL_ASCII, which passes bytes on) its non-ASCII characters are written as \uXXXX escapes, as
/// `ServerText::display` does for arguments, instead of bytes that are invalid or wrong there.
pub(crate) fn for_server(text: String) -> String {
    if text.is_ascii() || !crate::server_text::needs_conversion() {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            out.push_str(&format!("\\u{:04X}", c as u32));
        }
    }
    out
}

/// 22004: a NULL would otherwise flow silently into the lock manager (`pg_advisory_lock(NULL)`
/// takes no lock and returns NULL), so every advlock argument is checked explicitly.
#[track_caller]
pub fn null_argument(function: &str, argument: &str) -> ! {
    Report::new(
        PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
        format!("argument \"{argument}\" of {function} must not be null"),
    )
    .hint(match argument {
        "key" | "ns" | "id" | "keys" | "ids" => {
            "A NULL key would lock nothing: pass a value for every part of the key."
        }
        "timeout_ms" => {
            "Use 0 for a pure try (no wait) or a positive number of milliseconds to wait at most."
        }
        "scope" | "mode" => {
            "Omit the argument to use its default, or pass one of the allowed values."
        }
        _ => "Pass a value for this argument.",
    })
    .raise()
}

/// 22023 for a value outside the accepted set.
#[track_caller]
pub fn invalid_argument(message: impl Into<String>, hint: impl Into<String>) -> ! {
    Report::new(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, message)
        .hint(hint)
        .raise()
}

/// Unwraps an SQL argument or raises 22004 naming it.
#[track_caller]
pub fn required<T>(value: Option<T>, function: &str, argument: &str) -> T {
    match value {
        Some(v) => v,
        None => null_argument(function, argument),
    }
}

/// The noun a count wants, singular or plural (what PostgreSQL's errmsg_plural does for its own
/// messages).
pub fn noun<'a>(n: usize, singular: &'a str, plural: &'a str) -> &'a str {
    if n == 1 {
        singular
    } else {
        plural
    }
}

/// "1 backend", "2 backends": a count with its noun.
pub fn counted(n: usize, singular: &str, plural: &str) -> String {
    format!("{n} {}", noun(n, singular, plural))
}
