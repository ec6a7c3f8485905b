"""The SQL edition's advlock_key against the published vectors and the pure-Python reference.

Every vector of pg_test/vectors/advlock_key_v1.json through every form that applies (text id;
bigint id and its decimal text for the id_int vectors; advlock_key(ns) when the id is empty), then
random (ns, id) pairs -- multibyte, empty, long, every length around the 8-byte word boundary --
against docs/keys/advlock_key.py. Prints "vectors: N passed, M failed".
Connection: ADVLOCK_PGHOST / ADVLOCK_PGPORT / ADVLOCK_PGDATABASE.
"""
import json
import os
import random
import sys
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "docs" / "keys"))
from advlock_key import advlock_key  # noqa: E402

conn = psycopg.connect(host=os.environ.get("ADVLOCK_PGHOST", "127.0.0.1"),
                       port=int(os.environ["ADVLOCK_PGPORT"]),
                       dbname=os.environ["ADVLOCK_PGDATABASE"], user="postgres", autocommit=True)
passed = failed = 0


def check(what, got, want):
    global passed, failed
    if got == want:
        passed += 1
    else:
        failed += 1
        print(f"vectors: FAIL {what}: got {got}, want {want}")


for v in json.loads((HERE.parent / "vectors" / "advlock_key_v1.json").read_text())["vectors"]:
    ns, key = v["ns"], v["key"]
    if "id_int" in v:  # a bigint id: the (ns, bigint) form, and its decimal text
        n = v["id_int"]
        check(f"advlock_key({ns!r}, {n}::bigint)",
              conn.execute("SELECT advlock_key(%s::text, %s::bigint)", (ns, n)).fetchone()[0], key)
        check(f"advlock_key({ns!r}, '{n}'::text)",
              conn.execute("SELECT advlock_key(%s::text, %s::text)", (ns, str(n))).fetchone()[0], key)
        continue
    id_ = v["id"]
    check(f"advlock_key({ns!r}, {id_!r}::text)",
          conn.execute("SELECT advlock_key(%s::text, %s::text)", (ns, id_)).fetchone()[0], key)
    if id_ == "":
        check(f"advlock_key({ns!r})", conn.execute("SELECT advlock_key(%s::text)", (ns,)).fetchone()[0], key)

rng = random.Random(int(os.environ.get("ADVLOCK_SEED", "20261201")))
alphabet = "abcXYZ019 _-:/'\"\\é€😀ß中"
pairs = [("n", "x" * n) for n in range(0, 40)]          # every tail length, several words
pairs += [("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))),
           "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))) for _ in range(300)]
pairs += [("big", "y" * 5000)]
for ns, id_ in pairs:
    check(f"advlock_key({ns!r}, {id_[:20]!r}... {len(id_)} chars)",
          conn.execute("SELECT advlock_key(%s::text, %s::text)", (ns, id_)).fetchone()[0], advlock_key(ns, id_))
for n in [0, 1, -1, 42, -7, 2**63 - 1, -2**63] + [rng.randint(-2**63, 2**63 - 1) for _ in range(50)]:
    check(f"advlock_key('account', {n}::bigint)",
          conn.execute("SELECT advlock_key('account', %s::bigint)", (n,)).fetchone()[0], advlock_key("account", str(n)))
print(f"vectors: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
