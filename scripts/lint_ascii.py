#!/usr/bin/env python3
"""ASCII lint (scripts/lint.sh ascii): what advlock sends to a server must read the same in every
server encoding. PostgreSQL reads an extension script in the encoding advlock.control names
(UTF8), converting it to the database's, and a character the database encoding lacks fails
CREATE EXTENSION / ALTER EXTENSION UPDATE; error, hint and detail texts go to the server as bytes
it takes to be in its own encoding (EUC_JP, LATIN1, ...). So every such text is ASCII:

  - Rust string, byte-string, C-string and char literals under src/ (messages, SQL the
    extension runs, extension_sql! blocks); comments may use any character;
  - the current SQL scripts sql/*.sql (the install script's pieces, comments.sql, the upgrade
    scripts; sql/archive/ holds released install scripts, which never change) and the templates
    of sql/templates/;
  - the SQL edition's sources and build (edition/src/*, edition/*.sql) and advlock.control.

Write a non-ASCII test value as an escape (Rust "\\u{e9}", SQL chr(233) or U&'\\00e9').
Prints each offending literal or line with its position; exits 1 when there is one.
Usage: scripts/lint_ascii.py [FILE...]   (default: the files above)
"""
import glob
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rust_literals(text):
    """(line, literal) for every string/char literal of Rust source `text` (a small lexer:
    line and nested block comments skipped, raw strings r#"..."#, escapes, lifetimes)."""
    i, n, line = 0, len(text), 1
    out = []
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    line += text[i] == "\n"
                    i += 1
        elif c in "rbc" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) and _raw_start(text, i):
            # r"..", r#".."#, br"..", cr#".."#: no escapes, ends at the quote and as many #.
            j = i + 1 + (text[i + 1] == "r" if c != "r" else 0)
            hashes = 0
            while text[j] == "#":
                hashes, j = hashes + 1, j + 1
            end = text.find('"' + "#" * hashes, j + 1)
            end = n if end < 0 else end
            out.append((line, text[i:end + 1 + hashes]))
            line += text.count("\n", i, end)
            i = end + 1 + hashes
        elif c == '"' or (c in "bc" and text[i + 1:i + 2] == '"' and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"))):
            start, i = i, (i + 1 if c == '"' else i + 2)
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            out.append((line, text[start:i + 1]))
            line += text.count("\n", start, i)
            i += 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{..}', b'x') or a lifetime ('a, 'static).
            if text[i + 1:i + 2] == "\\":
                end = text.find("'", i + 3)
                out.append((line, text[i:end + 1]))
                i = end + 1
            elif i + 2 < n and text[i + 2] == "'":
                out.append((line, text[i:i + 3]))
                i += 3
            else:
                i += 1
        else:
            i += 1
    return out


def _raw_start(text, i):
    j = i + 1
    if text[i] in "bc":
        if text[j:j + 1] != "r":
            return False
        j += 1
    while j < len(text) and text[j] == "#":
        j += 1
    return text[j:j + 1] == '"' and (text[i] == "r" or text[i + 1] == "r")


def default_files():
    rust = glob.glob(os.path.join(REPO, "src", "**", "*.rs"), recursive=True)
    plain = (glob.glob(os.path.join(REPO, "sql", "*.sql")) + glob.glob(os.path.join(REPO, "sql", "templates", "*.sql"))
             + glob.glob(os.path.join(REPO, "edition", "src", "*"))
             + glob.glob(os.path.join(REPO, "edition", "*.sql"))
             + [os.path.join(REPO, "advlock.control")])
    return sorted(rust) + sorted(plain)


def check(path):
    text = open(path, encoding="utf-8").read()
    rel = os.path.relpath(path, REPO)
    found = []
    if path.endswith(".rs"):
        for line, lit in rust_literals(text):
            if not lit.isascii():
                bad = "".join(sorted({ch for ch in lit if not ch.isascii()}))
                found.append(f"{rel}:{line}: non-ASCII {bad!r} in the literal {lit[:100]!r}")
    else:
        for number, row in enumerate(text.splitlines(), 1):
            if not row.isascii():
                bad = "".join(sorted({ch for ch in row if not ch.isascii()}))
                found.append(f"{rel}:{number}: non-ASCII {bad!r}: {row.strip()[:100]!r}")
    return found


def main(argv):
    files = [os.path.abspath(f) for f in argv] or default_files()
    problems = [p for f in files for p in check(f)]
    for p in problems:
        print(p)
    print(f"lint_ascii: {len(files)} files, {len(problems)} non-ASCII "
          f"{'literal or line' if len(problems) == 1 else 'literals or lines'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
