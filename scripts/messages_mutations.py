#!/usr/bin/env python3
"""Proves the message lint (scripts/messages.py, #42): copies what it reads (src/, sql/,
edition/src/, edition's move_to_extension.sql and advlock_sql.sql, and the two scripts) to a temporary directory, checks that the lint passes on the
copy as is, then plants one single-word edit at a time and checks that the lint fails on each and
names the file edited (or the report site that fills the edited report in). Each edit changes one
word (its first letter's case swapped) or adds one; they are derived from the catalog and the
report sites the lint finds:
  word      for every catalog entry and every side that raises it (rust, sql, edition): one word
            of its message, of its hint and of its detail, at the report site found first
  suffix    for every message whose text ends in a placeholder: a word appended after it
  prefix    for every message whose text starts with a placeholder: a word put before it
  describe  one word of every text of each [[description]] (the key, the holders), in the
            formatter of each side
Prints each edit that the lint let through and "mutations: N planted, M caught"; exits 1 unless
every one was caught (and the copy as is passed).

Usage: scripts/messages_mutations.py [-v]
"""
import contextlib
import importlib.util
import io
import re
import shutil
import sys
import tempfile
from pathlib import Path

repo = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("messages", repo / "scripts" / "messages.py")
messages = importlib.util.module_from_spec(spec)
spec.loader.exec_module(messages)
HOLE, Text = messages.HOLE, messages.Text
verbose = "-v" in sys.argv[1:]


def lint(copy):
    """(failed, output) of the lint on the copy."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = messages.Checker(copy).run()
    return rc != 0, out.getvalue()


def words(text):
    """The words of a text's literal parts (3 letters or more, one lower-case), last first."""
    return [w for part in reversed(text.s.split(HOLE)) for w in reversed(re.findall(r"[A-Za-z]{3,}", part))
            if re.search("[a-z]", w)]


def edit(word):
    """A one-word edit: the word with its first letter's case swapped."""
    return word[0].swapcase() + word[1:]


def segment_pattern(segment):
    """A regex for a literal stretch of a message as a source file writes it: its words in order,
    whatever quoting, escapes or line continuations stand between them."""
    return r"[\W_]+".join(re.escape(w) for w in re.findall(r"[A-Za-z0-9]+", segment))


def in_comment(src, at):
    """Whether src[at] is in a // or -- comment (a comment marker before it on its line)."""
    line = src[src.rfind("\n", 0, at) + 1:at]
    return "//" in line or re.search(r"^\s*--|\s--\s", line) is not None


BLANKED = {}


def in_literal(src, at, path):
    """Whether src[at] is inside a string literal (Rust) or a quoted literal (SQL)."""
    if path.endswith(".rs"):
        if src not in BLANKED:
            BLANKED.clear()
            BLANKED[src] = messages.rust_blank(src)
        return BLANKED[src][at] != src[at]
    return src[src.rfind("\n", 0, at) + 1:at].count("'") % 2 == 1


def site(msg):
    path, line = re.match(r"([^:]+):(\d+)", msg.where).groups()
    return path, int(line)


class Mutations:
    def __init__(self, copy):
        self.copy = copy
        self.planted, self.missed = 0, []

    def locate(self, path, line, text, which=None):
        """(file, start, end) of where the source writes a literal stretch of text: the longest
        one (which=0: the first, -1: the last), or as many of its words as are written out
        together (a constant put in at a call is not), in path nearest line, else in another
        file of the same side."""
        segments = [p for p in text.s.split(HOLE)]
        if which is not None:  # the stretch after the leading placeholder, or before the trailing one
            segments = [[p for p in segments if p.strip()][which]]
        else:
            segments = sorted((p for p in segments if words(Text(p))), key=len, reverse=True)
        side_dir = self.copy / Path(path).parts[0]
        candidates = [path] + sorted(str(p.relative_to(self.copy)) for p in side_dir.rglob("*")
                                     if p.is_file() and str(p.relative_to(self.copy)) != path
                                     and "tests" not in p.relative_to(self.copy).parts)
        for candidate in candidates:
            src = (self.copy / candidate).read_text()
            for segment in segments:
                tokens = re.findall(r"[A-Za-z0-9]+", segment)
                # Drop words from the front (or, for the stretch after a leading placeholder, the
                # back) until what is left is written out together.
                for k in range(len(tokens)):
                    part = tokens[k:] if which != 0 else tokens[:len(tokens) - k]
                    if len(part) < min(2, len(tokens)):
                        break
                    pattern = r"[\W_]+".join(re.escape(w) for w in part)
                    spans = [x for x in re.finditer(pattern, src)
                             if not in_comment(src, x.start()) and in_literal(src, x.start(), candidate)]
                    if spans:
                        target = line if candidate == path else 1
                        best = min(spans, key=lambda x: abs(src.count("\n", 0, x.start()) + 1 - target))
                        return candidate, best.start(), best.end()
        return None

    def plant_word(self, what, path, line, text, call=None):
        """Edits the last word of a literal stretch of text where the source writes it."""
        found = self.locate(path, line, text)
        if not found:
            self.missed.append(f"{what}: could not find {text.show()!r} near {path}:{line} (fix the mutation test)")
            return
        file, start, end = found
        src = (self.copy / file).read_text()
        word = [w for w in re.finditer(r"[A-Za-z]{3,}", src[start:end]) if re.search("[a-z]", w.group(0))][-1]
        self.plant(what, file, start + word.start(), re.escape(word.group(0)), edit(word.group(0)), sites=(path, call))

    def plant_around(self, what, path, line, text, side, suffix, call=None):
        """Puts a word after the trailing placeholder (suffix) or before the leading one."""
        found = self.locate(path, line, text, -1 if suffix else 0)
        quote = '"' if side == "rust" else "'"
        if not found:
            self.missed.append(f"{what}: could not find {text.show()!r} near {path}:{line} (fix the mutation test)")
            return
        file, start, end = found
        src = (self.copy / file).read_text()
        if suffix:  # the closing quote after the stretch (and its placeholder)
            at = src.index(quote, end)
            self.plant(what, file, at, re.escape(quote), " now" + quote, sites=(path, call))
        else:  # the opening quote before the placeholder that comes before the stretch
            at = src.rindex(quote, 0, start)
            self.plant(what, file, at, re.escape(quote), quote + "the ", sites=(path, call))

    def plant(self, what, path, at, pattern, replace, sites=()):
        """Replaces the match of pattern at offset at of the copy's path, runs the lint, restores
        the file. Caught: the lint fails naming the file edited or the report site."""
        file = self.copy / path
        original = file.read_text()
        m = re.compile(pattern).match(original, at)
        assert m, (what, path, at, pattern)
        file.write_text(original[:m.start()] + m.expand(replace) + original[m.end():])
        try:
            failed, out = lint(self.copy)
        finally:
            file.write_text(original)
        self.planted += 1
        where = f"{path}:{original.count(chr(10), 0, m.start()) + 1}"
        caught = failed and any(p in out for p in (path,) + tuple(sites) if p)
        if verbose or not caught:
            print(f"mutations: {'caught' if caught else 'MISSED'} {what}: {where}: {m.group(0)!r} -> {m.expand(replace)!r}")
        if not caught:
            self.missed.append(what)


def main():
    with tempfile.TemporaryDirectory(prefix="advlock-mutations.") as tmp:
        copy = Path(tmp)
        for d in ("src", "sql", "edition/src"):
            shutil.copytree(repo / d, copy / d)
        for f in ("edition/move_to_extension.sql", "edition/advlock_sql.sql"):
            shutil.copy(repo / f, copy / f)
        (copy / "scripts").mkdir()
        for s in ("messages.py", "build_edition.py"):
            shutil.copy(repo / "scripts" / s, copy / "scripts" / s)
        failed, out = lint(copy)
        if failed:
            print(out + "mutations: the lint fails on the unmodified copy")
            return 1
        checker = messages.Checker(copy)
        with contextlib.redirect_stdout(io.StringIO()):
            found = (messages.rust_messages(checker) + messages.sql_messages(checker, "sql")
                     + messages.sql_messages(checker, "edition"))
        entries = checker.catalog["message"]
        m = Mutations(copy)
        for e in entries:
            choices = e.get("choice", {})
            for side in e.get("sides", ["rust", "edition"]):
                raised = [msg for msg in found if msg.side == side and msg.sqlstate == e["sqlstate"]
                          and all(checker.unify(e.get(k), getattr(msg, k), side, choices, msg.texts) is None
                                  for k in ("message", "hint", "detail"))]
                if not raised:
                    m.missed.append(f"{e['id']} ({side}): no report site found")
                    continue
                msg = raised[0]
                path, line = site(msg)
                call = path
                if getattr(msg, "body", None):  # a call filling in a report: edit the report
                    msg = msg.body
                    path, line = site(msg)
                for part in ("message", "hint", "detail"):
                    text = getattr(msg, part)
                    if text is None or not words(text):
                        continue
                    m.plant_word(f"word {e['id']} {part} ({side})", path, line, text, call)
                if msg.message.s.endswith(HOLE) and msg.message.s.strip(HOLE):
                    m.plant_around(f"suffix {e['id']} ({side})", path, line, msg.message, side, True, call)
                if msg.message.s.startswith(HOLE) and msg.message.s.strip(HOLE):
                    m.plant_around(f"prefix {e['id']} ({side})", path, line, msg.message, side, False, call)
        for d in checker.descriptions.values():
            rust_path, rust_fn = d["rust"].split()
            formatters = [("rust", rust_path, rust_fn_line(copy / rust_path, rust_fn))]
            formatters += [("edition",) + edition_fn_line(copy, name) for name in d["edition"]]
            for text in d["texts"]:
                for side, path, line in formatters:
                    m.plant_word(f"describe {d['id']} {text!r} ({side})", path, line,
                                 Text(re.sub(r"\{\w+\}", HOLE, text), [""] * text.count("{")))
        print(f"mutations: {m.planted} planted, {m.planted - len(m.missed)} caught")
        for x in m.missed:
            print(f"mutations: not caught or not planted: {x}")
        return 1 if m.missed else 0


def rust_fn_line(path, name):
    src = path.read_text()
    return src.count("\n", 0, re.search(rf"\bfn\s+{name}\b", src).start()) + 1


def edition_fn_line(copy, name):
    for path in sorted((copy / "edition" / "src").glob("*.sql")):
        src = path.read_text()
        m = re.search(rf"FUNCTION @extschema@\.{name}\(", src)
        if m:
            return f"edition/src/{path.name}", src.count("\n", 0, m.start()) + 1
    raise SystemExit(f"mutations: no edition function {name}")


if __name__ == "__main__":
    sys.exit(main())
