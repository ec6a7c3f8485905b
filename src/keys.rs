//! Stable namespaced keys: `advlock_key(ns, id)`, contract v1.
//!
//! key = SipHash-2-4, 128-bit key all zero, over UTF-8(ns) || 0x00 || UTF-8(id); the 64-bit
//! result reinterpreted as a two's-complement bigint. This never changes once released: keys
//! are stored by clients, computed in other languages and held across upgrades.
use crate::errors::{invalid_argument, required};
use crate::server_text::ServerText;
use core::hash::Hasher;
use siphasher::sip::SipHasher24;

/// The key contract on UTF-8 bytes. Public so tests and the reference vectors use the same code.
pub fn advlock_key_bytes(ns: &[u8], id: &[u8]) -> i64 {
    // One contiguous message hashes faster than three streaming writes; typical keys fit.
    const STACK: usize = 256;
    let len = ns.len() + 1 + id.len();
    if len <= STACK {
        let mut buf = [0u8; STACK];
        buf[..ns.len()].copy_from_slice(ns);
        buf[ns.len() + 1..len].copy_from_slice(id);
        return SipHasher24::new_with_keys(0, 0).hash(&buf[..len]) as i64;
    }
    let mut h = SipHasher24::new_with_keys(0, 0);
    h.write(ns);
    h.write(&[0]);
    h.write(id);
    h.finish() as i64
}

/// Decimal text of an integer id without heap allocation ("42", "-7").
pub fn decimal(id: i64, buf: &mut [u8; 20]) -> &[u8] {
    let mut n = id.unsigned_abs();
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if id < 0 {
        i -= 1;
        buf[i] = b'-';
    }
    &buf[i..]
}

/// Validates the namespace argument shared by every `(ns, id)` function.
#[track_caller]
pub fn namespace<'a>(ns: Option<ServerText<'a>>, function: &str) -> ServerText<'a> {
    let ns = required(ns, function, "ns");
    if ns.as_bytes().is_empty() {
        invalid_argument(
            format!("argument \"ns\" of {function} must not be empty"),
            "Name the feature the lock belongs to, e.g. advlock_key('billing', 42): \
             the namespace keeps features from colliding.",
        );
    }
    ns
}

pub fn key_of_text(ns: &ServerText, id: &ServerText) -> i64 {
    advlock_key_bytes(&ns.to_utf8(), &id.to_utf8())
}

pub fn key_of_int(ns: &ServerText, id: i64) -> i64 {
    let mut buf = [0u8; 20];
    advlock_key_bytes(&ns.to_utf8(), decimal(id, &mut buf))
}

// advlock_key is called once per row in scans and generated columns, where pgrx's generic
// wrapper cost as much as the hash itself. Its three SQL functions therefore call hand-written
// fmgr entry points (`fmgr`), which take the common case — both arguments present, in-line,
// non-empty, needing no encoding conversion — without any guard, and hand everything else to the
// guarded functions below, which check, convert and raise exactly as before. The SQL and the
// symbol names are those pgrx generated for 0.2.0, so databases still at 0.2.0 keep working.

/// `advlock_key(ns text, id text) → bigint`: the checked path of `fmgr::advlock_key_text_wrapper`.
pub fn advlock_key_text(ns: Option<ServerText>, id: Option<ServerText>) -> i64 {
    let ns = namespace(ns, "advlock_key");
    let id = required(id, "advlock_key", "id");
    key_of_text(&ns, &id)
}

/// `advlock_key(ns text, id bigint) → bigint`: same as the decimal text of `id`.
pub fn advlock_key_int(ns: Option<ServerText>, id: Option<i64>) -> i64 {
    let ns = namespace(ns, "advlock_key");
    let id = required(id, "advlock_key", "id");
    key_of_int(&ns, id)
}

/// `advlock_key(ns text) → bigint`: a singleton key, same as `advlock_key(ns, '')`.
pub fn advlock_key_ns(ns: Option<ServerText>) -> i64 {
    let ns = namespace(ns, "advlock_key");
    advlock_key_bytes(&ns.to_utf8(), b"")
}

pgrx::extension_sql!(
    r#"
CREATE FUNCTION "advlock_key"("ns" text, "id" bigint) RETURNS bigint
IMMUTABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'advlock_key_int_wrapper';

CREATE FUNCTION "advlock_key"("ns" text) RETURNS bigint
IMMUTABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'advlock_key_ns_wrapper';

CREATE FUNCTION "advlock_key"("ns" text, "id" text) RETURNS bigint
IMMUTABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'advlock_key_text_wrapper';
"#,
    name = "advlock_key",
);

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn golden_values() {
        assert_eq!(
            advlock_key_bytes(b"rollup", b"nightly"),
            2132624222628149741
        );
        assert_eq!(advlock_key_bytes(b"account", b"42"), 7700915891107303510);
        assert_eq!(advlock_key_bytes(b"migrate", b""), -4880605526533726798);
    }

    #[test]
    fn decimal_matches_to_string() {
        for n in [0i64, 1, -1, 42, 1_000_000, i64::MAX, i64::MIN, -9, 10] {
            let mut buf = [0u8; 20];
            assert_eq!(decimal(n, &mut buf), n.to_string().as_bytes());
        }
    }

    #[test]
    fn stack_and_streaming_paths_agree() {
        for n in [0usize, 1, 7, 8, 100, 254, 255, 256, 300, 5000] {
            let id = vec![b'x'; n];
            let mut h = SipHasher24::new_with_keys(0, 0);
            h.write(b"ns");
            h.write(&[0]);
            h.write(&id);
            assert_eq!(
                advlock_key_bytes(b"ns", &id),
                h.finish() as i64,
                "id of {n} bytes"
            );
        }
    }

    #[test]
    fn separator_prevents_concatenation_collisions() {
        assert_ne!(
            advlock_key_bytes(b"ab", b"c"),
            advlock_key_bytes(b"a", b"bc")
        );
    }
}
