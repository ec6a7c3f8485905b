"""What the extension, its code and CONTRIBUTING.md say about themselves stays true:
- every advlock_* name a COMMENT mentions (what `\\df+` and `\\dv+` show users) is an object of
  the extension as installed now, so a description cannot keep naming a view or function that
  was replaced;
- CONTRIBUTING.md's layout, entry by entry: every path it lists exists, every source file,
  hand-written SQL file and suite directory has its entry, and the directories whose entry names
  their files (scripts/, docs/, src/tests/, src/preload/labels/ and stats/) name each, and only
  files they hold;
- the comments of src/** name files, modules, items and advlock functions that exist, and a
  clause that puts a `symbol` in a file finds it there (test_code_comments_name_what_exists).
"""
import glob
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


# Directories whose layout entry names each of their files (in its description).
NAMED_FILE_BY_FILE = ("src/tests/", "src/preload/labels/", "src/preload/stats/", "scripts/", "docs/")


def layout_entries(block):
    """{path: description} of the layout, entry by entry: a line at column 0 starts an entry
    (several paths: "a, b"), one indented by two spaces a sub-entry of the last directory entry
    (its path under it), deeper lines continue the description."""
    entries, directory, last = {}, "", None
    for line in block.split("\n"):
        top = re.match(r"([^\s,]+(?:, [^\s,]+)*)\s*(.*)", line)
        sub = re.match(r"  (\S+)\s+(.*)", line)
        if top:
            names = top.group(1).split(", ")
            if names[0].endswith("/"):
                directory = names[0]
            last = names
            for n in names:
                entries[n] = top.group(2)
        elif sub and not line.startswith("   "):
            last = [directory + sub.group(1)]
            entries[last[0]] = sub.group(2)
        elif last:
            for n in last:
                entries[n] += " " + line.strip()
    return entries


def test_contributing_layout_matches_the_tree():
    block = layout_block()
    entries = layout_entries(block)
    words = set(re.findall(r"[\w.*/-]+", block))
    problems = []
    # Entry by entry: its path exists (a glob: something matches).
    for path in entries:
        if not glob.glob(os.path.join(REPO, path)):
            problems.append(f"layout entry {path}: not in the tree")
    # The directories that name their files: each file named exists there, each file there is named.
    for directory in NAMED_FILE_BY_FILE:
        text = entries.get(directory)
        if text is None:
            problems.append(f"layout: no entry {directory}")
            continue
        named = set(re.findall(r"(?<![\w/.-])([\w-]+\.(?:rs|py|sh|md))\b", text))
        present = {f for f in os.listdir(os.path.join(REPO, directory)) if os.path.isfile(os.path.join(REPO, directory, f))
                   and not f.startswith(".")}
        problems += [f"layout entry {directory} names {f}, which is not in {directory}" for f in sorted(named - present)]
        problems += [f"{directory}{f} is not named in the layout entry {directory}" for f in sorted(present - named)]
    # Every Rust source file: an entry of its own, or named by its directory's entry.
    for root, _, files in os.walk(os.path.join(REPO, "src")):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), REPO)
            directory = os.path.dirname(rel) + "/"
            if f.endswith(".rs") and rel not in entries and directory not in NAMED_FILE_BY_FILE:
                problems.append(f"{rel} has no entry in the layout")
    for f in os.listdir(os.path.join(REPO, "sql")):
        if f.endswith(".sql") and not f.startswith("advlock--") and f"sql/{f}" not in entries:
            problems.append(f"sql/{f} has no entry in the layout")
    for d in os.listdir(os.path.join(REPO, "pg_test")):
        if os.path.isdir(os.path.join(REPO, "pg_test", d)) and not d.startswith(".") and d != "__pycache__" \
                and f"{d}/" not in words:
            problems.append(f"pg_test/{d}/ is not in the layout")
    for d in os.listdir(os.path.join(REPO, "clients")):
        if os.path.isdir(os.path.join(REPO, "clients", d)) and f"clients/{d}/" not in entries:
            problems.append(f"clients/{d}/ has no entry in the layout")
    for path in re.findall(r"(?:src|sql|scripts|pg_test|clients|docs|edition)/[\w./*-]+", block):
        if not glob.glob(os.path.join(REPO, path.rstrip(".,"))):
            problems.append(f"{path} is in the layout but not in the tree")
    assert not problems, "\n".join(problems)


# ---- what the Rust comments say about the code (#42) -----------------------------------------
# Module docs and comments in src/** name files (`leases.rs`), modules and items
# (`crate::leases::take`, `leases::take`, `Target::describe`) and say where a symbol is ("the
# waits (`leases.rs`) reset and wait on `MyLatch`"). Each such claim is checked against the tree:
# a file named exists; a path names a module of the crate and an item that module defines; a
# clause that names a file and `symbols` finds one of those symbols in that file.

ITEM = r"(?:pub(?:\([\w:]+\))?\s+)?(?:unsafe\s+|const\s+|async\s+|extern\s+\"C\"\s+)*" \
       r"(?:fn|struct|enum|const|static|type|trait|mod|union)\s+(\w+)|macro_rules!\s*(\w+)"


def rust_sources(repo):
    """{path relative to src/: text} of every Rust file."""
    out = {}
    for root, _, files in os.walk(os.path.join(repo, "src")):
        for f in files:
            if f.endswith(".rs"):
                path = os.path.join(root, f)
                out[os.path.relpath(path, os.path.join(repo, "src"))] = open(path, encoding="utf-8").read()
    return out


def module_files(sources, parts):
    """The file of module crate::parts (a.rs or a/mod.rs), or None."""
    base = "/".join(parts)
    for candidate in (f"{base}.rs", f"{base}/mod.rs"):
        if candidate in sources:
            return candidate
    return None


def defines(text, name):
    """Whether Rust text defines an item (or method, field-less enum variant) called name."""
    return any(name in (m.group(1), m.group(2)) for m in re.finditer(ITEM, text)) or \
        re.search(rf"^\s*{name}\s*[,({{=]", text, re.M) is not None  # an enum variant or a field


def comments(text):
    """(line, comment text) of each run of // comments (/// and //! too), joined."""
    out, run, start = [], [], 0
    for n, line in enumerate(text.split("\n"), 1):
        m = re.match(r"\s*//[/!]?\s?(.*)$", line)
        if m:
            if not run:
                start = n
            run.append(m.group(1))
        elif run:
            out.append((start, " ".join(run)))
            run = []
    if run:
        out.append((start, " ".join(run)))
    return out


def sql_texts(repo):
    sql = os.path.join(repo, "sql")
    return [open(os.path.join(sql, f), encoding="utf-8").read() for f in sorted(os.listdir(sql)) if f.endswith(".sql")]


def comment_problems(repo):
    sources = rust_sources(repo)
    basenames = {os.path.basename(p) for p in sources}
    top = {p[:-3] for p in sources if "/" not in p} | {p.split("/")[0] for p in sources if "/" in p}
    code = [re.sub(r"^\s*//.*$", "", t, flags=re.M) for t in sources.values()]  # comments aside
    problems = []
    for path, text in sorted(sources.items()):
        for line, comment in comments(text):
            where = f"src/{path}:{line}"
            # Files: every x.rs named exists.
            for f in re.findall(r"(?<![\w./-])((?:[\w]+/)*\w+\.rs)\b", comment):
                if os.path.basename(f) not in basenames and not os.path.exists(os.path.join(repo, f)):
                    problems.append(f"{where}: names {f}, which does not exist")
            # Paths into the crate: crate::a::b, or a::b with a a top-level module.
            for p in re.findall(r"\b((?:crate::)?\w+(?:::\w+)+)", comment):
                parts = p.split("::")
                if parts[0] == "crate":
                    parts = parts[1:]
                elif parts[0] not in top:
                    continue
                i = 0
                while i < len(parts) and module_files(sources, parts[:i + 1]):
                    i += 1
                if i == 0:
                    problems.append(f"{where}: names {p}: no module {parts[0]}")
                    continue
                rest = parts[i:]
                if rest and not defines(sources[module_files(sources, parts[:i])], rest[0]):
                    problems.append(f"{where}: names {p}: module {'::'.join(parts[:i])} defines no {rest[0]}")
            # advlock's own functions, `advlock_x()`: a Rust fn or pg_extern, or SQL of sql/.
            for f in re.findall(r"`(advlock_\w+)\(\)`", comment):
                if not any(re.search(rf"\b{f}\b", t) for t in code + sql_texts(repo)):
                    problems.append(f"{where}: names {f}(), which no Rust or SQL source defines")
            # Claims of place: a clause naming a file and `symbols` finds one of them there.
            for clause in re.split(r";|, and |, but |: |\. ", comment):
                files = re.findall(r"`((?:\w+/)*\w+\.rs)`|\(((?:\w+/)*\w+\.rs)\)", clause)
                files = {a or b for a, b in files}
                symbols = {s for s in re.findall(r"`(\w+)(?:\(\))?`", clause) if not s.endswith(".rs")}
                if not files or not symbols:
                    continue
                for f in files:
                    target = [t for p, t in sources.items() if p == f or os.path.basename(p) == f]
                    if target and not any(re.search(rf"\b{s}\b", t) for t in target for s in symbols):
                        problems.append(f"{where}: says {f} has {', '.join(sorted(symbols))}; it has none of them"
                                        f" ({clause.strip()!r})")
    return problems


def test_code_comments_name_what_exists():
    problems = comment_problems(REPO)
    assert not problems, "\n".join(problems)
