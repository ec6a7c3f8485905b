"""Property test: advlock_key in SQL equals the pure-Python reference (docs/keys/advlock_key.py)
on random (ns, id) pairs, random Unicode included. Fixed seed (ADVLOCK_SEED overrides), printed."""
import os
import random

from relsupport import FULL, advlock_key, figure

CASES = 30000 if FULL else 3000
SEED = int(os.environ.get("ADVLOCK_SEED", "20261129"))

# Code point ranges to draw from: ASCII (controls included, NUL excluded: text cannot hold it),
# Latin-1, Greek, Cyrillic, Hebrew/Arabic (RTL), combining marks, CJK, private use, specials
# (BOM, ZWJ, U+FFFD, noncharacters), and astral planes (emoji, historic scripts, plane 16).
RANGES = [(0x01, 0x7F), (0x80, 0xFF), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF), (0x300, 0x36F),
          (0x4E00, 0x9FFF), (0xE000, 0xF8FF), (0xFE00, 0xFFFF), (0x1F300, 0x1FAFF), (0x10000, 0x1013F),
          (0x100000, 0x10FFFD)]
SPECIALS = ["\u200d", "\ufeff", "\ufffd", "\uffff", "\u0301", "'", "\\", "%", "_", "\n", " "]


def random_text(rng, min_len, max_len):
    n = rng.randint(min_len, max_len)
    out = []
    for _ in range(n):
        if rng.random() < 0.1:
            out.append(rng.choice(SPECIALS))
            continue
        lo, hi = rng.choice(RANGES)
        cp = rng.randint(lo, hi)
        if 0xD800 <= cp <= 0xDFFF:  # surrogates are not characters
            cp = 0x41
        out.append(chr(cp))
    return "".join(out)


def test_random_pairs_match_reference(admin):
    print(f"\nkeys property test: seed {SEED} (ADVLOCK_SEED), {CASES} cases")
    rng = random.Random(SEED)
    ns_list = [random_text(rng, 1, 24) for _ in range(CASES)]
    id_list = [random_text(rng, 0, 48) if rng.random() < 0.9 else random_text(rng, 200, 2000)
               for _ in range(CASES)]
    int_list = [rng.choice([0, -1, 1, 2**63 - 1, -2**63, rng.randint(-2**63, 2**63 - 1),
                            rng.randint(-1000, 1000)]) for _ in range(CASES)]

    rows = admin.execute(
        """SELECT advlock_key(ns, id), advlock_key(ns, i), advlock_key(ns)
             FROM unnest(%s::text[], %s::text[], %s::int8[]) WITH ORDINALITY AS u(ns, id, i, n)
            ORDER BY n""", (ns_list, id_list, int_list)).fetchall()
    assert len(rows) == CASES
    mismatches = []
    for n, (ns, id_, i, row) in enumerate(zip(ns_list, id_list, int_list, rows)):
        expected = (advlock_key(ns, id_), advlock_key(ns, i), advlock_key(ns))
        if tuple(row) != expected:
            mismatches.append(f"case {n}: ns={ns!r} id={id_!r} i={i}: sql {tuple(row)} != reference {expected}")
    assert not mismatches, f"seed {SEED}: {len(mismatches)} mismatches, first:\n" + "\n".join(mismatches[:5])
    # The text and integer forms agree: advlock_key(ns, 42) = advlock_key(ns, '42').
    same = admin.execute("SELECT bool_and(advlock_key(ns, i) = advlock_key(ns, i::text)) "
                         "FROM unnest(%s::text[], %s::int8[]) AS u(ns, i)", (ns_list, int_list)).fetchone()[0]
    assert same is True
    figure(f"keys property test: seed {SEED} (ADVLOCK_SEED), {CASES} random cases x 3 forms, all equal to the reference")
