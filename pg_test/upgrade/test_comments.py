"""What the extension and CONTRIBUTING.md say about themselves stays true:
- every advlock_* name a COMMENT mentions (what `\\df+` and `\\dv+` show users) is an object of
  the extension as installed now, so a description cannot keep naming a view or function that
  was replaced;
- CONTRIBUTING.md's layout lists every source file, hand-written SQL file and suite directory of
  the tree, and every path it lists exists.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pgtestsupport import REPO, Server  # noqa: E402

PG = Server.from_env(5418, "postgres")

MEMBERS = """
SELECT coalesce(p.proname, c.relname)
  FROM pg_depend d
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'advlock'
  LEFT JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND p.oid = d.objid
  LEFT JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid
 WHERE d.deptype = 'e' AND d.refclassid = 'pg_extension'::regclass
   AND d.classid IN ('pg_proc'::regclass, 'pg_class'::regclass)
"""
COMMENTS = """
SELECT coalesce(p.oid::regprocedure::text, c.oid::regclass::text), obj_description(d.objid, d.classid::regclass::name)
  FROM pg_depend d
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'advlock'
  LEFT JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND p.oid = d.objid
  LEFT JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid
 WHERE d.deptype = 'e' AND d.refclassid = 'pg_extension'::regclass
   AND d.classid IN ('pg_proc'::regclass, 'pg_class'::regclass)
"""


def test_comments_name_only_objects_that_exist():
    PG.recreate_database("advlock_comments")
    try:
        with PG.connect("advlock-test/comments", dbname="advlock_comments") as conn:
            conn.execute("CREATE EXTENSION advlock")
            names = {r[0] for r in conn.execute(MEMBERS)}
            comments = conn.execute(COMMENTS).fetchall()
        assert len(comments) > 20 and len(names) > 20
        missing = [(obj, name) for obj, text in comments for name in re.findall(r"\badvlock_\w+", text or "")
                   if name not in names]
        assert not missing, f"COMMENTs naming objects that do not exist: {missing}"
        assert all(text for _, text in comments), [obj for obj, text in comments if not text]
    finally:
        PG.drop_database("advlock_comments")


def layout_block():
    text = open(os.path.join(REPO, "CONTRIBUTING.md"), encoding="utf-8").read()
    section = text[text.index("## Layout\n"):]
    return section[section.index("```text\n") + 8:section.index("\n```", section.index("```text\n"))]


def test_contributing_layout_matches_the_tree():
    block = layout_block()
    words = set(re.findall(r"[\w.*/-]+", block))
    problems = []
    for root, _, files in os.walk(os.path.join(REPO, "src")):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(root, f), REPO)
            parent = os.path.basename(root) + "/"
            # A top-level module by its path; a nested one by its name under its directory's entry.
            if rel not in words and not (f in block and parent in block):
                problems.append(f"{rel} is not in the layout")
    for f in os.listdir(os.path.join(REPO, "sql")):
        if f.endswith(".sql") and not f.startswith("advlock--") and f"sql/{f}" not in words:
            problems.append(f"sql/{f} is not in the layout")
    for d in os.listdir(os.path.join(REPO, "pg_test")):
        if os.path.isdir(os.path.join(REPO, "pg_test", d)) and not d.startswith(".") and d != "__pycache__" \
                and f"{d}/" not in words:
            problems.append(f"pg_test/{d}/ is not in the layout")
    for d in os.listdir(os.path.join(REPO, "clients")):
        if os.path.isdir(os.path.join(REPO, "clients", d)) and f"clients/{d}/" not in words:
            problems.append(f"clients/{d}/ is not in the layout")
    for path in re.findall(r"(?:src|sql|scripts|pg_test|clients|docs)/[\w./*-]+", block):
        if "*" not in path and not os.path.exists(os.path.join(REPO, path)):
            problems.append(f"{path} is in the layout but not in the tree")
    assert not problems, "\n".join(problems)
