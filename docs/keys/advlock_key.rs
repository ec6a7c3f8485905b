//! advlock key contract v1 for Rust, with the `siphasher` crate (Cargo.toml: `siphasher = "1"`;
//! the extension itself uses the same crate). `advlock_key(ns, id)` == `SELECT advlock_key(ns, id)`:
//! SipHash-2-4 with an all-zero key over UTF-8(ns) || 0x00 || UTF-8(id), read as an i64.
//! Bind the i64 as a bigint (tokio-postgres / sqlx / diesel all map i64 to int8).
use core::hash::Hasher;
use siphasher::sip::SipHasher24;

/// `advlock_key(ns, id)`. `&str` is always UTF-8, so this is the whole contract.
/// Panics on an empty `ns`, which the database rejects too.
pub fn advlock_key(ns: &str, id: &str) -> i64 {
    assert!(!ns.is_empty(), "advlock_key: ns must not be empty");
    let mut h = SipHasher24::new_with_keys(0, 0);
    // Hasher::write streams raw bytes: three writes hash exactly ns ++ [0] ++ id.
    h.write(ns.as_bytes());
    h.write(&[0]);
    h.write(id.as_bytes());
    h.finish() as i64 // same bits, two's complement
}

/// `advlock_key(ns, id bigint)`: the key of `id`'s decimal text (42 -> "42").
pub fn advlock_key_int(ns: &str, id: i64) -> i64 {
    advlock_key(ns, &id.to_string())
}

/// `advlock_key(ns)`, the same as `advlock_key(ns, "")`.
pub fn advlock_key_ns(ns: &str) -> i64 {
    advlock_key(ns, "")
}
