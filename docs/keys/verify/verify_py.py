"""Checks docs/keys/advlock_key.py against every vector in pg_test/vectors/advlock_key_v1.json.

Usage: python3 verify_py.py [path/to/advlock_key_v1.json]
"""
import json
import pathlib
import sys

here = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(here.parent))
from advlock_key import advlock_key  # noqa: E402  (docs/keys/advlock_key.py)

path = sys.argv[1] if len(sys.argv) > 1 else here.parents[2] / "pg_test/vectors/advlock_key_v1.json"
vectors = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))["vectors"]  # ints are exact
passed = failed = 0
for v in vectors:
    id_ = v["id_int"] if "id_int" in v else v["id"]
    got = advlock_key(v["ns"], id_)
    ok = got == v["key"] and (id_ != "" or advlock_key(v["ns"]) == v["key"])
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {v['ns']!r}, {id_!r}: got {got}, want {v['key']}")
try:
    advlock_key("", "x")
    failed += 1
    print("FAIL empty ns must be rejected")
except ValueError:
    passed += 1
print(f"python: {len(vectors)} vectors + 1 empty-ns check")
print(f"python: {passed} passed, {failed} failed")
sys.exit(0 if failed == 0 and passed > 0 else 1)
