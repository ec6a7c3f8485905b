"""Scenario 8: keys computed client side from the published spec (advlock_key.py) are the
server's keys, so a client may lock with the built-in pg_advisory_xact_lock(key) and advlock
sees it, and the other way round."""
import asyncio
import json
import os
import random

import asyncpg
import pytest

from advlock_key import advlock_key, siphash24
from pgsupport import apg, psy

VECTORS = os.path.join(os.path.dirname(__file__), "..", "vectors", "advlock_key_v1.json")


def load_vectors():
    with open(VECTORS, encoding="utf-8") as f:
        return json.load(f)["vectors"]


def test_siphash_reference_vector():
    # The SipHash paper's test vector: key 00 01 .. 0f, message 00 01 .. 0e (15 bytes).
    k0 = int.from_bytes(bytes(range(0, 8)), "little")
    k1 = int.from_bytes(bytes(range(8, 16)), "little")
    assert siphash24(bytes(range(15)), k0, k1) == 0xA129CA6149BE45E5


def test_python_reference_matches_vectors_file():
    vectors = load_vectors()
    assert len(vectors) >= 20
    for v in vectors:
        id_ = v["id_int"] if "id_int" in v else v["id"]
        assert advlock_key(v["ns"], id_) == v["key"], v


def test_python_reference_rejects_what_the_server_rejects():
    with pytest.raises(ValueError):
        advlock_key("", "x")
    with pytest.raises(ValueError):
        advlock_key(None, "x")
    with pytest.raises(ValueError):
        advlock_key("ns", None)
    assert advlock_key("ns", 7) == advlock_key("ns", "7")
    assert advlock_key("ns") == advlock_key("ns", "")
    # Types SQL has no advlock_key for: a clear TypeError, not an AttributeError from inside.
    for bad_id in (True, 1.5, b"x"):
        with pytest.raises(TypeError, match="id must be a str or an int"):
            advlock_key("ns", bad_id)
    with pytest.raises(TypeError, match="ns must be a str"):
        advlock_key(b"ns", "x")


def test_server_matches_vectors_file():
    vectors = load_vectors()
    text = [v for v in vectors if "id" in v]
    ints = [v for v in vectors if "id_int" in v]
    assert ints, "the vectors file has bigint-id cases"
    with psy("advlock-test/keys") as conn:
        got = conn.execute(
            "SELECT advlock_key(ns, id) FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY t(ns, id, n) ORDER BY n",
            ([v["ns"] for v in text], [v["id"] for v in text])).fetchall()
        assert [r[0] for r in got] == [v["key"] for v in text]
        got = conn.execute(
            "SELECT advlock_key(ns, id) FROM unnest(%s::text[], %s::int8[]) WITH ORDINALITY t(ns, id, n) ORDER BY n",
            ([v["ns"] for v in ints], [v["id_int"] for v in ints])).fetchall()
        assert [r[0] for r in got] == [v["key"] for v in ints]
        # The one-argument form is the empty id.
        assert conn.execute("SELECT advlock_key('migrate')").fetchone()[0] == advlock_key("migrate")


def _random_text(rng: random.Random, max_len: int) -> str:
    """Random text mixing ASCII, Latin-1, BMP (no surrogates) and astral code points; no NUL
    (PostgreSQL text cannot hold it)."""
    ranges = [(0x01, 0x7F), (0x80, 0x7FF), (0x800, 0xD7FF), (0xE000, 0xFFFD), (0x10000, 0x10FFFF)]
    out = []
    for _ in range(rng.randint(0, max_len)):
        lo, hi = rng.choice(ranges)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def test_server_matches_python_on_random_inputs():
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    ns_list, id_list = [], []
    for i in range(600):
        ns = _random_text(rng, 12) or "n"  # the namespace must not be empty
        ns_list.append(ns)
        # Lengths around the 8-byte block boundary and a few long ones.
        id_list.append(_random_text(rng, 40 if i % 10 else 300))
    int_ns = [_random_text(rng, 8) or "n" for _ in range(200)]
    int_ids = [rng.randint(-(1 << 63), (1 << 63) - 1) for _ in range(200)]
    with psy("advlock-test/keys") as conn:
        got = [r[0] for r in conn.execute(
            "SELECT advlock_key(ns, id) FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY t(ns, id, n) ORDER BY n",
            (ns_list, id_list)).fetchall()]
        want = [advlock_key(ns, id_) for ns, id_ in zip(ns_list, id_list)]
        mismatches = [(ns, id_, g, w) for ns, id_, g, w in zip(ns_list, id_list, got, want) if g != w]
        assert not mismatches, f"seed {seed}: {mismatches[:3]}"
        got = [r[0] for r in conn.execute(
            "SELECT advlock_key(ns, id) FROM unnest(%s::text[], %s::int8[]) WITH ORDINALITY t(ns, id, n) ORDER BY n",
            (int_ns, int_ids)).fetchall()]
        want = [advlock_key(ns, id_) for ns, id_ in zip(int_ns, int_ids)]
        assert got == want, f"seed {seed}"


def test_builtin_lock_on_client_key_is_seen_by_advlock():
    key = advlock_key("invoice", "2024-0001 ✓")
    with psy("advlock-test/keys/builtin-holder", autocommit=False) as holder, \
            psy("advlock-test/keys/advlock-client", autocommit=False) as other:
        holder_pid = holder.info.backend_pid
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
        assert other.execute("SELECT advlock_try_with_timeout('invoice', '2024-0001 ✓', 0)").fetchone()[0] is False
        rows = other.execute("SELECT pid, application_name, granted FROM advlock_holders WHERE key = %s",
                             (key,)).fetchall()
        assert rows == [(holder_pid, "advlock-test/keys/builtin-holder", True)]
        other.rollback()
        holder.commit()
        assert other.execute("SELECT advlock_try_with_timeout('invoice', '2024-0001 ✓', 0)").fetchone()[0] is True
        # And the other way round: the built-in sees advlock's lock on the same key.
        assert holder.execute("SELECT pg_try_advisory_xact_lock(%s)", (key,)).fetchone()[0] is False
        other.commit()
        assert holder.execute("SELECT pg_try_advisory_xact_lock(%s)", (key,)).fetchone()[0] is True
        holder.commit()


def test_driver_parameter_binding_gives_the_same_key():
    """Integer ids hash as their decimal text, so whichever overload a driver's parameter
    binding picks, the key is the same. asyncpg types an untyped $n from the function's
    argument: with the (text, text) overload preferred for unknowns, a Python int there is
    refused client side; cast it ($1::bigint) or pass str."""
    want = advlock_key("account", 42)

    async def with_asyncpg():
        conn = await apg("advlock-test/keys/asyncpg-binding")
        try:
            got = {
                await conn.fetchval("SELECT advlock_key('account', $1::bigint)", 42),
                await conn.fetchval("SELECT advlock_key('account', $1)", "42"),
                await conn.fetchval("SELECT advlock_key($1, $2::int8)", "account", 42),
            }
            with pytest.raises(asyncpg.exceptions.DataError):
                await conn.fetchval("SELECT advlock_key('account', $1)", 42)
            return got
        finally:
            await conn.close()

    assert asyncio.run(with_asyncpg()) == {want}
    with psy("advlock-test/keys/psycopg-binding") as conn:
        got = {conn.execute("SELECT advlock_key(%s, %s)", ("account", 42)).fetchone()[0],
               conn.execute("SELECT advlock_key(%s, %s)", ("account", "42")).fetchone()[0],
               conn.execute("SELECT advlock_key('account', %s)", (42,)).fetchone()[0]}
        assert got == {want}
