//! What a caller asks for: which key, in which scope and mode — validated once, up front.
use crate::errors::{invalid_argument, required};
use crate::keys;
pub use crate::lock_mode::{Mode, Scope};
use crate::server_text::ServerText;

impl Scope {
    #[track_caller]
    pub fn parse(value: Option<ServerText>, function: &str) -> Scope {
        let value = required(value, function, "scope");
        match value.as_bytes() {
            b"xact" => Scope::Xact,
            b"session" => Scope::Session,
            // A mode in the scope position: (key, timeout_ms, 'shared') is the usual slip.
            mode @ (b"exclusive" | b"shared") => {
                let mode = String::from_utf8_lossy(mode);
                invalid_argument(
                    format!("invalid value for argument \"scope\" of {function}: \"{mode}\""),
                    format!("'{mode}' is a mode: pass it by name, mode => '{mode}' (the argument after timeout_ms is scope: 'xact' or 'session')."),
                )
            }
            _ => invalid_argument(
                format!("invalid value for argument \"scope\" of {function}: \"{}\"", value.display()),
                "Allowed values are 'xact' (released at commit or rollback) and 'session' (held until advlock_unlock or disconnect).",
            ),
        }
    }
}

impl Mode {
    #[track_caller]
    pub fn parse(value: Option<ServerText>, function: &str) -> Mode {
        let value = required(value, function, "mode");
        match value.as_bytes() {
            b"exclusive" => Mode::Exclusive,
            b"shared" => Mode::Shared,
            _ => invalid_argument(
                format!(
                    "invalid value for argument \"mode\" of {function}: \"{}\"",
                    value.display()
                ),
                "Allowed values are 'exclusive' and 'shared'.",
            ),
        }
    }
}

/// The id part of an `(ns, id)` call, kept as given so messages can name it.
pub enum Id<'a> {
    Text(ServerText<'a>),
    Int(i64),
}

/// The lock's key, with the `(ns, id)` it came from when there is one. The label is only
/// rendered for messages, so the uncontended path allocates nothing.
pub struct Target<'a> {
    pub key: i64,
    pub label: Option<(ServerText<'a>, Id<'a>)>,
}

impl<'a> Target<'a> {
    /// A bare key.
    pub fn of_key(key: i64) -> Target<'a> {
        Target { key, label: None }
    }

    /// `advlock_key(ns, id)` of a checked namespace and a text id, labelled with both.
    pub fn of_text(ns: ServerText<'a>, id: ServerText<'a>) -> Target<'a> {
        Target {
            key: keys::key_of_text(&ns, &id),
            label: Some((ns, Id::Text(id))),
        }
    }

    /// `advlock_key(ns, id)` of a checked namespace and an integer id, labelled with both.
    pub fn of_int(ns: ServerText<'a>, id: i64) -> Target<'a> {
        Target {
            key: keys::key_of_int(&ns, id),
            label: Some((ns, Id::Int(id))),
        }
    }

    #[track_caller]
    pub fn from_key(key: Option<i64>, function: &str) -> Target<'a> {
        Target::of_key(required(key, function, "key"))
    }

    #[track_caller]
    pub fn from_text(
        ns: Option<ServerText<'a>>,
        id: Option<ServerText<'a>>,
        function: &str,
    ) -> Target<'a> {
        let ns = keys::namespace(ns, function);
        Target::of_text(ns, required(id, function, "id"))
    }

    #[track_caller]
    pub fn from_int(ns: Option<ServerText<'a>>, id: Option<i64>, function: &str) -> Target<'a> {
        let ns = keys::namespace(ns, function);
        Target::of_int(ns, required(id, function, "id"))
    }

    /// "key 123" or "key 123 = advlock_key('rollup', 'nightly')": the key description of every
    /// message (sql/messages.toml's `key` description; the edition's advlock_edition_describe).
    pub fn describe(&self) -> String {
        // A text argument inside SQL quotes, its quotes doubled.
        let quoted = |s: &ServerText| s.display().replace('\'', "''");
        match &self.label {
            None => format!("key {}", self.key),
            Some((ns, Id::Text(id))) => format!(
                "key {} = advlock_key('{}', '{}')",
                self.key,
                quoted(ns),
                quoted(id)
            ),
            Some((ns, Id::Int(id))) => {
                format!("key {} = advlock_key('{}', {})", self.key, quoted(ns), id)
            }
        }
    }
}

/// What a bounded acquisition asks for besides its key: `timeout_ms`, `scope` and `mode`, checked
/// in that order (the order of the SQL arguments) by one parser for every function that takes
/// them.
pub struct Request {
    pub timeout_ms: i32,
    pub scope: Scope,
    pub mode: Mode,
}

impl Request {
    #[track_caller]
    pub fn parse(
        function: &str,
        timeout_ms: Option<i32>,
        scope: Option<ServerText>,
        mode: Option<ServerText>,
    ) -> Request {
        Request {
            timeout_ms: timeout(timeout_ms, function),
            scope: Scope::parse(scope, function),
            mode: Mode::parse(mode, function),
        }
    }
}

#[track_caller]
pub fn timeout(value: Option<i32>, function: &str) -> i32 {
    let ms = required(value, function, "timeout_ms");
    if ms < 0 {
        invalid_argument(
            format!("argument \"timeout_ms\" of {function} must not be negative: {ms}"),
            "Use 0 for a pure try (no wait) or a positive number of milliseconds to wait at most.",
        );
    }
    ms
}

/// Declares the three key forms of a SQL function at once: `(key bigint, …)`,
/// `(ns text, id text, …)` and `(ns text, id bigint, …)`, under the three Rust names given, in
/// that order. pgrx derives each form's C symbol (`<name>_wrapper`) from its name, and released
/// install scripts name those symbols, so the names never change. Each form builds its `Target`
/// under `$function`'s name (the argument checks and messages of `Target::from_*`), binds it to
/// `$target`, and evaluates `$body`. The arguments after the key are spliced as written (pgrx's
/// `default!` included); so are the attributes, and the return type, if any, in brackets. The calling
/// module imports `ServerText` and `Target`.
macro_rules! key_forms {
    (
        $(#[$attr:meta])*
        fn [$key_fn:ident, $text_fn:ident, $int_fn:ident]($($args:tt)*) $(-> [$($ret:tt)*])?
        for $function:expr, |$target:ident| $body:expr
    ) => {
        $(#[$attr])*
        fn $key_fn(key: Option<i64>, $($args)*) $(-> $($ret)*)? {
            let $target = Target::from_key(key, $function);
            $body
        }

        $(#[$attr])*
        fn $text_fn(ns: Option<ServerText>, id: Option<ServerText>, $($args)*) $(-> $($ret)*)? {
            let $target = Target::from_text(ns, id, $function);
            $body
        }

        $(#[$attr])*
        fn $int_fn(ns: Option<ServerText>, id: Option<i64>, $($args)*) $(-> $($ret)*)? {
            let $target = Target::from_int(ns, id, $function);
            $body
        }
    };
}
pub(crate) use key_forms;
