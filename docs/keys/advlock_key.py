"""advlock key contract v1, in pure Python: an independent implementation of the spec.

key = SipHash-2-4 (128-bit key all zero) over UTF-8(ns) || 0x00 || UTF-8(id), the 64-bit
result read as a signed two's-complement integer. Integer ids are hashed as their decimal text.
Copy this file into any Python client to compute keys without the database.

The Python client (clients/python, advlock.key) hashes with this file's siphash24 (its package
holds a link to this file, and a copy of it in the sdist and the wheel): keep that function's
name and signature.
"""

MASK = (1 << 64) - 1


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & MASK


def siphash24(data: bytes, k0: int = 0, k1: int = 0) -> int:
    v0 = k0 ^ 0x736F6D6570736575
    v1 = k1 ^ 0x646F72616E646F6D
    v2 = k0 ^ 0x6C7967656E657261
    v3 = k1 ^ 0x7465646279746573

    def rounds(n: int) -> None:
        nonlocal v0, v1, v2, v3
        for _ in range(n):
            v0 = (v0 + v1) & MASK
            v1 = _rotl(v1, 13)
            v1 ^= v0
            v0 = _rotl(v0, 32)
            v2 = (v2 + v3) & MASK
            v3 = _rotl(v3, 16)
            v3 ^= v2
            v0 = (v0 + v3) & MASK
            v3 = _rotl(v3, 21)
            v3 ^= v0
            v2 = (v2 + v1) & MASK
            v1 = _rotl(v1, 17)
            v1 ^= v2
            v2 = _rotl(v2, 32)

    tail_len = len(data) % 8
    for i in range(0, len(data) - tail_len, 8):
        m = int.from_bytes(data[i:i + 8], "little")
        v3 ^= m
        rounds(2)
        v0 ^= m
    last = (len(data) & 0xFF) << 56 | int.from_bytes(data[len(data) - tail_len:], "little")
    v3 ^= last
    rounds(2)
    v0 ^= last
    v2 ^= 0xFF
    rounds(4)
    return v0 ^ v1 ^ v2 ^ v3


def advlock_key(ns: str, id: "str | int" = "") -> int:
    if ns is None or id is None:
        raise ValueError("ns and id must not be None")
    if not isinstance(ns, str):
        raise TypeError(f"ns must be a str, got {type(ns).__name__}")
    if ns == "":
        raise ValueError("ns must not be empty")
    # bool is an int in Python, but advlock_key(ns, true) does not exist in SQL.
    if isinstance(id, bool) or not isinstance(id, (str, int)):
        raise TypeError(f"id must be a str or an int, got {type(id).__name__}")
    text = id if isinstance(id, str) else str(id)
    h = siphash24(ns.encode("utf-8") + b"\x00" + text.encode("utf-8"))
    return h - (1 << 64) if h >= 1 << 63 else h


if __name__ == "__main__":
    assert advlock_key("rollup", "nightly") == 2132624222628149741
    assert advlock_key("account", 42) == 7700915891107303510
    assert advlock_key("migrate") == -4880605526533726798
    print("golden values ok")
