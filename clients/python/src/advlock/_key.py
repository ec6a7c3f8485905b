"""advlock key spec v1 (docs/keys/SPEC.md) in pure Python: no server, no dependency.

key = SipHash-2-4 with an all-zero 128-bit key over UTF-8(ns) || 0x00 || UTF-8(id), read as a
signed 64-bit integer. An integer id hashes as its decimal text, so key("account", 42) ==
key("account", "42") == SELECT advlock_key('account', 42).
"""

from __future__ import annotations

# SipHash-2-4 is the published reference's (docs/keys/advlock_key.py, the copy-me file users
# take), one implementation for both: _reference_key.py is a link to that file in the
# repository, and a copy of it in the sdist and the wheel (hatchling reads through the link).
from ._reference_key import siphash24

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
    h = siphash24(check_ns(ns).encode("utf-8") + b"\x00" + id_text(id).encode("utf-8"))
    return h - (1 << 64) if h >= 1 << 63 else h
