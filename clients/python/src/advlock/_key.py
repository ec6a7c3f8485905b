"""advlock key spec v1 (docs/keys/SPEC.md) in pure Python: no server, no dependency.

key = SipHash-2-4 with an all-zero 128-bit key over UTF-8(ns) || 0x00 || UTF-8(id), read as a
signed 64-bit integer. An integer id hashes as its decimal text, so key("account", 42) ==
key("account", "42") == SELECT advlock_key('account', 42).
"""

from __future__ import annotations

_MASK = (1 << 64) - 1


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & _MASK


def _siphash24(data: bytes) -> int:
    v0 = 0x736F6D6570736575
    v1 = 0x646F72616E646F6D
    v2 = 0x6C7967656E657261
    v3 = 0x7465646279746573

    def rounds(n: int) -> None:
        nonlocal v0, v1, v2, v3
        for _ in range(n):
            v0 = (v0 + v1) & _MASK
            v1 = _rotl(v1, 13) ^ v0
            v0 = _rotl(v0, 32)
            v2 = (v2 + v3) & _MASK
            v3 = _rotl(v3, 16) ^ v2
            v0 = (v0 + v3) & _MASK
            v3 = _rotl(v3, 21) ^ v0
            v2 = (v2 + v1) & _MASK
            v1 = _rotl(v1, 17) ^ v2
            v2 = _rotl(v2, 32)

    tail = len(data) % 8
    for i in range(0, len(data) - tail, 8):
        m = int.from_bytes(data[i : i + 8], "little")
        v3 ^= m
        rounds(2)
        v0 ^= m
    last = (len(data) & 0xFF) << 56 | int.from_bytes(data[len(data) - tail :], "little")
    v3 ^= last
    rounds(2)
    v0 ^= last
    v2 ^= 0xFF
    rounds(4)
    return v0 ^ v1 ^ v2 ^ v3


_INT8_MIN, _INT8_MAX = -(1 << 63), (1 << 63) - 1


def check_ns(ns: object) -> str:
    """The server's rules for ns (22004 NULL, 22023 empty), checked before any round trip."""
    if not isinstance(ns, str):
        raise TypeError(f"ns must be a str, got {type(ns).__name__}")
    if ns == "":
        raise ValueError("ns must not be empty")
    if "\x00" in ns:
        raise ValueError("ns must not contain NUL characters (PostgreSQL text cannot hold them)")
    return ns


def id_text(id: object, name: str = "id") -> str:
    """An id as the text the server hashes: str as is, int as decimal (bigint range, as the
    server's bigint overload). bool is refused: True would silently become key(ns, 1)."""
    if isinstance(id, bool) or not isinstance(id, (str, int)):
        raise TypeError(f"{name} must be a str or an int, got {type(id).__name__}")
    if isinstance(id, int):
        if not _INT8_MIN <= id <= _INT8_MAX:
            raise ValueError(f"{name} {id} is out of the bigint range")
        return str(id)
    if "\x00" in id:
        raise ValueError(f"{name} must not contain NUL characters (PostgreSQL text cannot hold them)")
    return id


def key(ns: str, id: str | int = "") -> int:
    """The advisory lock key of (ns, id): equal to SELECT advlock_key(ns, id)."""
    h = _siphash24(check_ns(ns).encode("utf-8") + b"\x00" + id_text(id).encode("utf-8"))
    return h - (1 << 64) if h >= 1 << 63 else h
