#!/usr/bin/env python3
"""Every client proves every scenario of clients/SCENARIOS.md: a test whose name carries the id.

Reads the ids (`**S01 — ...**`) of clients/SCENARIOS.md, and the test names of each client:
Python, every `def test_*` (also async) under clients/python/tests, read with ast; Ruby, every
`def test_*` (or `define_method("test_*...")`) under clients/ruby/test; Node, the title of every `test(...)` / `it(...)` under
clients/node/test. An id is a word of the name: `s07` / `S07` with no letter or digit touching it
(test_s06_s07_race, "S06 S07 race"). Fails when a required client lacks an id, when a test names
an id the list does not define, or when the list defines an id twice. Python and Ruby are
required; Node once clients/node exists (reported until then). Prints one line per client and
exits non-zero on any failure. Usage: clients/check_scenarios.py [CLIENT...]
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

CLIENTS = Path(__file__).resolve().parent
LIST = CLIENTS / "SCENARIOS.md"
DEFINED = re.compile(r"^\*\*(S\d{2}) — ", re.M)
ID = re.compile(r"(?<![A-Za-z0-9])[sS](\d{2})(?![0-9])")
RUBY_TEST = re.compile(r"""^\s*(?:def\s+|define_method\(?\s*["'])(test_\w+)""", re.M)
NODE_TEST = re.compile(r"""\b(?:test|it)\s*\(\s*(?:(["'])((?:\\.|(?!\1).)*)\1|`([^`]*)`)""")
# client: required even before its directory exists (Node is checked once clients/node exists)
REQUIRED = {"python": True, "ruby": True, "node": False}


def defined_ids() -> list[str]:
    return DEFINED.findall(LIST.read_text(encoding="utf-8"))


def python_names(tests: Path) -> list[str]:
    names = []
    for path in sorted(tests.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
                names.append(node.name)
    return names


def ruby_names(tests: Path) -> list[str]:
    names = []
    for path in sorted(tests.rglob("*.rb")):
        names += RUBY_TEST.findall(path.read_text(encoding="utf-8"))
    return names


def node_names(tests: Path) -> list[str]:
    names = []
    for pattern in ("*.js", "*.mjs", "*.cjs", "*.ts", "*.mts"):
        for path in sorted(tests.rglob(pattern)):
            if "node_modules" in path.parts:
                continue
            for m in NODE_TEST.finditer(path.read_text(encoding="utf-8")):
                names.append(m.group(2) if m.group(2) is not None else m.group(3))
    return names


READERS = {
    "python": (CLIENTS / "python" / "tests", python_names),
    "ruby": (CLIENTS / "ruby" / "test", ruby_names),
    "node": (CLIENTS / "node" / "test", node_names),
}


def main(argv: list[str]) -> int:
    ids = defined_ids()
    failed = 0
    if not ids:
        print(f"scenarios: no scenario ids found in {LIST}")
        return 1
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        print(f"scenarios: {LIST.name} defines {', '.join(twice)} more than once")
        failed += 1
    known = set(ids)
    for client in argv or list(REQUIRED):
        if client not in READERS:
            print(f"scenarios: unknown client {client!r} (known: {', '.join(READERS)})")
            failed += 1
            continue
        tests, read = READERS[client]
        where = tests.parent.relative_to(CLIENTS.parent)
        if not tests.parent.is_dir():
            if REQUIRED[client]:
                print(f"scenarios: {client}: FAIL, no {where}")
                failed += 1
            else:
                print(f"scenarios: {client}: not checked, {where} does not exist yet")
            continue
        # Once the client exists it is checked like the others (a missing test directory names no id).
        named = {f"S{n}" for name in (read(tests) if tests.is_dir() else []) for n in ID.findall(name)}
        missing = [i for i in ids if i not in named]
        unknown = sorted(named - known)
        problems = []
        if missing:
            problems.append(f"no test named for {', '.join(missing)}")
        if unknown:
            problems.append(f"tests name ids {LIST.name} does not define: {', '.join(unknown)}")
        covered = len(ids) - len(missing)
        if problems:
            failed += 1
            print(f"scenarios: {client}: FAIL, {covered}/{len(ids)} scenarios; " + "; ".join(problems))
        else:
            print(f"scenarios: {client}: ok, {covered}/{len(ids)} scenarios")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
