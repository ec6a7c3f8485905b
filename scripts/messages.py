#!/usr/bin/env python3
"""Messages once (#35): checks the extension's Rust errors and warnings and the SQL edition's
RAISEs against one catalog, sql/messages.toml (its header says what it lists and how). The
`messages` lint of scripts/lint.sh.

Read:
  Rust       src/*.rs except the extension-only files of the catalog's `skip_rust`:
             every Report::new(PgSqlErrorCode::X, msg) with its chained .detail()/.hint(),
             every invalid_argument(msg, hint) and negative_older_than(function, hint) call, and
             null_argument's messages (one per argument named in its hint's match arms, plus the
             `_` arm). A string literal is its text; format!("...") its template, each {x}, {}
             or {:02X} a placeholder; any other expression (a variable) one placeholder.
  edition    edition/src/*.sql, as scripts/build_edition.py writes them out (its -- @forms
             templates once per form): every RAISE with a message (RAISE; re-raises are skipped): the
             format literal, each % a placeholder; USING ERRCODE (a condition name), HINT,
             DETAIL, MESSAGE. A USING expression is 'literal', format('...') (each %s, %I, %L a
             placeholder), a concatenation of those with ||, or anything else: one placeholder.

Matching: a catalog placeholder stands for any text, a placeholder of either side's included
({function} matches Rust's {function} and the edition's literal advlock_unlock); a side's
placeholder matches only within a catalog placeholder, so what the catalog writes out each side
must write out. A message matches a catalog entry of its SQLSTATE whose message, hint and detail
all match; an entry without hint (detail) wants none. Fails when: a message matches no entry
(it says which entries have that message and what they say instead); an edition RAISE matches
an entry the edition does not share (`edition = false`), or a Rust message one the extension
does not raise (`rust = false`); a shared entry is not raised by both sides; a *_variants text
is not a literal of the function raising the entry, on either side; a [[fragment]] occurs in no
Rust literal or no edition RAISE text.

Usage: scripts/messages.py [REPO]     (default: the repository holding this script)
"""
import importlib.util
import re
import sys
import tomllib
from functools import lru_cache
from pathlib import Path

repo = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
HOLE = "\x00"  # a placeholder, in every normalised text

# SQLSTATEs of the PgSqlErrorCode names and PL/pgSQL condition names used (teach it a new one).
RUST_CODES = {
    "ERRCODE_WARNING": "01000", "ERRCODE_NULL_VALUE_NOT_ALLOWED": "22004",
    "ERRCODE_INVALID_PARAMETER_VALUE": "22023", "ERRCODE_INVALID_TRANSACTION_STATE": "25000",
    "ERRCODE_ACTIVE_SQL_TRANSACTION": "25001", "ERRCODE_READ_ONLY_SQL_TRANSACTION": "25006",
    "ERRCODE_UNDEFINED_OBJECT": "42704", "ERRCODE_INSUFFICIENT_PRIVILEGE": "42501",
    "ERRCODE_OUT_OF_MEMORY": "53200", "ERRCODE_PROGRAM_LIMIT_EXCEEDED": "54000",
    "ERRCODE_LOCK_NOT_AVAILABLE": "55P03", "ERRCODE_INTERNAL_ERROR": "XX000",
}
SQL_CODES = {
    "null_value_not_allowed": "22004", "invalid_parameter_value": "22023",
    "read_only_sql_transaction": "25006", "insufficient_privilege": "42501",
    "out_of_memory": "53200", "program_limit_exceeded": "54000", "lock_not_available": "55P03",
}
problems = []


class Message:
    def __init__(self, side, where, sqlstate, message, hint=None, detail=None, texts=()):
        self.side, self.where, self.sqlstate = side, where, sqlstate
        self.message, self.hint, self.detail = message, hint, detail
        self.texts = texts  # the literals of the function that raises it (for *_variants)

    def show(self, text):
        return None if text is None else text.replace(HOLE, "{}")


# ---- matching --------------------------------------------------------------------------------

def unify(pattern, text):
    """True when text (with placeholders: HOLE, opaque) is an instance of the catalog's pattern,
    each of whose placeholders (HOLE) stands for any text, placeholders of text included. A
    placeholder of text matches only within one of the pattern's: what the catalog writes out,
    each side must write out too."""
    return pattern_re(pattern).fullmatch(text) is not None


@lru_cache(maxsize=None)
def pattern_re(pattern):
    return re.compile(".*?".join(re.escape(part) for part in pattern.split(HOLE)), re.S)


def optional_unify(catalog, found):
    if catalog is None or found is None:
        return catalog is None and found is None
    return unify(catalog, found)


# ---- Rust ------------------------------------------------------------------------------------

def rust_literal(src, i):
    """(text, end) of the Rust string literal at src[i] ("..." or r#"..."#)."""
    m = re.match(r'r(#*)"', src[i:])
    if m:
        close = '"' + m.group(1)
        end = src.index(close, i + len(m.group(0)))
        return src[i + len(m.group(0)):end], end + len(close)
    assert src[i] == '"', src[i:i + 40]
    out, j = [], i + 1
    while src[j] != '"':
        if src[j] == "\\":
            c = src[j + 1]
            if c == "\n":  # line continuation: the newline and the next line's indentation go
                j += 2
                while src[j] in " \t":
                    j += 1
                continue
            out.append({"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "0": "\0"}[c])
            j += 2
        else:
            out.append(src[j])
            j += 1
    return "".join(out), j + 1


def rust_args(src, i):
    """The top-level arguments (source text) of the call whose '(' is at src[i], and the end."""
    assert src[i] == "("
    args, depth, start, j = [], 0, i + 1, i
    while True:
        c = src[j]
        if c == '"' or (c == "r" and re.match(r'r#*"', src[j:]) and not src[j - 1].isalnum()):
            j = rust_literal(src, j)[1]
            continue
        if c == "'" and re.match(r"'(\\.|[^\\'])'", src[j:]):  # a char literal
            j += len(re.match(r"'(\\.|[^\\'])'", src[j:]).group(0))
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                last = src[start:j].strip()
                if last:
                    args.append(last)
                return args, j + 1
        elif c == "," and depth == 1:
            args.append(src[start:j].strip())
            start = j + 1
        j += 1


def format_template(template):
    """A format! template with each {...} a placeholder ({{ and }} are braces)."""
    out = re.sub(r"\{\{|\}\}|\{[^{}]*\}", lambda m: m.group(0)[0] if m.group(0) in ("{{", "}}") else HOLE,
                 template)
    return out


def rust_text(expr):
    """The text of a message, detail or hint expression, placeholders for what is computed."""
    expr = re.sub(r"\.(to_string|to_owned|into)\(\)$", "", expr.strip())
    if re.fullmatch(r'r?#*".*', expr, re.S):
        text, end = rust_literal(expr, 0)
        if end == len(expr):
            return text
    m = re.match(r"format!\s*\(", expr)
    if m:
        args, _ = rust_args(expr, m.end() - 1)
        return format_template(rust_literal(args[0], 0)[0])
    return HOLE


def rust_literals(code):
    """Every string literal of a stretch of Rust, format templates with placeholders."""
    out, i = [], 0
    while True:
        m = re.compile(r'(?<![\w\'])(r#*)?"').search(code, i)
        if not m:
            return out
        text, i = rust_literal(code, m.start())
        out.append(format_template(text))


def enclosing_fn(src, i):
    names = re.findall(r"\bfn\s+(\w+)", src[:i])
    return names[-1] if names else None


RUST_TEXTS, EDITION_TEXTS = [], []  # where a [[fragment]] may occur: Rust literals, edition RAISEs


def rust_messages(catalog):
    found = []
    skip = set(catalog.get("skip_rust", []))
    helper_bodies = {}
    for path in sorted((repo / "src").glob("*.rs")):
        if path.name in skip:
            continue
        src = path.read_text()
        rel = f"src/{path.name}"
        RUST_TEXTS.extend(rust_literals(src))
        line = lambda i: src.count("\n", 0, i) + 1  # noqa: E731
        for m in re.finditer(r"Report::new\(", src):
            args, end = rust_args(src, m.end() - 1)
            if enclosing_fn(src, m.start()) in ("new", "invalid_argument", "null_argument"):
                continue  # errors.rs's own helpers: read below
            code = args[0].split("::")[-1]
            if code not in RUST_CODES:
                problems.append(f"{rel}:{line(m.start())}: unknown error code {code} (teach scripts/messages.py)")
                continue
            msg = Message("rust", f"{rel}:{line(m.start())}", RUST_CODES[code], rust_text(args[1]),
                          texts=rust_literals(src[src.rfind("fn ", 0, m.start()):m.start()]))
            while True:
                c = re.match(r"\s*\.(detail|hint|raise|warn)\(", src[end:])
                if not c:
                    break
                cargs, end = rust_args(src, end + c.end() - 1)
                if c.group(1) in ("detail", "hint"):
                    setattr(msg, c.group(1), rust_text(cargs[0]))
            fn = enclosing_fn(src, m.start())
            if fn == "negative_older_than":
                helper_bodies[fn] = msg
                continue
            found.append(msg)
        for m in re.finditer(r"(?<![\w:])(invalid_argument|negative_older_than)\(", src):
            if re.search(r"\bfn\s+$", src[:m.start()]):
                continue
            args, _ = rust_args(src, m.end() - 1)
            where = f"{rel}:{line(m.start())}"
            if m.group(1) == "invalid_argument":
                found.append(Message("rust", where, "22023", rust_text(args[0]), rust_text(args[1])))
            else:
                found.append(("negative_older_than", where, rust_text(args[1])))
        if path.name == "errors.rs":
            found.extend(null_argument_messages(src, rel))
    out = []
    for f in found:
        if isinstance(f, tuple):  # a negative_older_than call: its body's message, its hint
            body = helper_bodies["negative_older_than"]
            out.append(Message("rust", f[1], body.sqlstate, body.message, f[2], body.detail))
        else:
            out.append(f)
    return out


def null_argument_messages(src, rel):
    """One message per argument null_argument names in its hint's match, and the `_` arm."""
    start = src.index("pub fn null_argument(")
    body = src[start:src.index("\n}\n", start)]
    m = re.search(r"format!\(\s*(\"(?:\\.|[^\"\\])*\")", body)
    template = rust_literal(m.group(1), 0)[0]
    out = []
    for arm in re.finditer(r"\n\s*((?:\"\w+\"\s*\|\s*)*\"\w+\"|_)\s*=>\s*\{?\s*(\"(?:\\.|[^\"\\])*\")", body):
        hint = rust_literal(arm.group(2), 0)[0]
        names = re.findall(r"\"(\w+)\"", arm.group(1)) or [HOLE]
        for name in names:
            text = template.replace("{argument}", name)
            out.append(Message("rust", f"{rel}:{src.count(chr(10), 0, start + arm.start()) + 2} (null_argument, {name})".replace(HOLE, "_"),
                               "22004", format_template(text), hint))
    return out


# ---- the SQL edition -------------------------------------------------------------------------

def sql_split(text, sep_re):
    """Splits text at the top-level matches of sep_re (outside '...' and parentheses)."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c == "'":
            i += 1
            while i < len(text):
                if text[i] == "'" and text[i + 1:i + 2] == "'":
                    i += 2
                elif text[i] == "'":
                    break
                else:
                    i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif depth == 0:
            m = re.compile(sep_re, re.I).match(text, i)
            if m and m.end() > i:
                parts.append(text[start:i])
                start = i = m.end()
                continue
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def sql_literal(expr):
    m = re.fullmatch(r"'((?:[^']|'')*)'", expr.strip(), re.S)
    return m.group(1).replace("''", "'") if m else None


def sql_text(expr):
    """The text of a USING expression, placeholders for what is computed."""
    out = []
    for part in sql_split(expr, r"\|\|"):
        lit = sql_literal(part)
        m = re.fullmatch(r"(?:pg_catalog\.)?format\((.*)\)", part, re.S)
        if lit is not None:
            out.append(lit)
        elif m and sql_literal(sql_split(m.group(1), ",")[0]) is not None:
            fmt = sql_literal(sql_split(m.group(1), ",")[0])
            out.append(re.sub(r"%%|%[sIL]", lambda x: "%" if x.group(0) == "%%" else HOLE, fmt))
        else:
            out.append(HOLE)
    return "".join(out)


def sql_without_comments(src):
    """src without its -- comments (a -- after an even number of quotes on its line)."""
    out = []
    for line in src.split("\n"):
        for m in re.finditer("--", line):
            if line[:m.start()].count("'") % 2 == 0:
                line = line[:m.start()]
                break
        out.append(line)
    return "\n".join(out)


def sql_literals(src):
    """Every literal of a stretch of PL/pgSQL, format templates with placeholders."""
    return [raise_format(t.replace("''", "'").replace("%s", "%"))
            for t in re.findall(r"'((?:[^']|'')*)'", sql_without_comments(src))]


def raise_format(fmt):
    return re.sub(r"%%|%", lambda x: "%" if x.group(0) == "%%" else HOLE, fmt)


def edition_forms():
    """build_edition.expand_forms of the repository checked: the edition's RAISEs are read as the
    build writes them, each -- @forms template once per form (a placeholder can be in a RAISE)."""
    spec = importlib.util.spec_from_file_location("build_edition", repo / "scripts" / "build_edition.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.expand_forms


def edition_messages():
    found = []
    expand_forms = edition_forms()
    for path in sorted((repo / "edition" / "src").glob("*.sql")):
        rel = f"edition/src/{path.name}"
        src, origins = expand_forms(path.read_text(), rel)
        for m in re.finditer(r"\bRAISE\b", src):
            if "--" in src[src.rfind("\n", 0, m.start()) + 1:m.start()]:
                continue  # a comment
            # the statement: up to the first ';' outside literals and parentheses
            stmt = sql_split(src[m.end():], r";")[0]
            if not stmt:
                continue  # RAISE; re-raises
            where = f"{rel}:{origins[src.count(chr(10), 0, m.start())]}"
            level = re.match(r"\s*(EXCEPTION|WARNING|NOTICE|INFO|LOG|DEBUG)?\s*", stmt, re.I)
            level_word = (level.group(1) or "EXCEPTION").upper()
            rest = stmt[level.end():]
            if re.match(r"USING\s", rest, re.I):
                head, using = "", rest[len("USING"):]
            else:
                head, using = (sql_split(rest, r"\s+USING\s+") + [""])[:2]
            options = {}
            for opt in sql_split(using, r",") if using.strip() else []:
                name, _, value = opt.partition("=")
                options[name.strip().upper()] = value.strip()
            if head.strip():
                fmt = sql_split(head, r",")[0]
                message = raise_format(sql_literal(fmt))
            else:
                message = sql_text(options.get("MESSAGE", "''"))
            if "ERRCODE" in options:
                name = sql_literal(options["ERRCODE"])
                if name not in SQL_CODES:
                    problems.append(f"{where}: unknown condition {name} (teach scripts/messages.py)")
                    continue
                code = SQL_CODES[name]
            else:
                code = "01000" if level_word == "WARNING" else "P0001"
            body = src[src.rfind("CREATE OR REPLACE FUNCTION", 0, m.start()):m.start()]
            texts = sql_literals(body)
            EDITION_TEXTS.extend([message] + [sql_text(options[k]) for k in ("HINT", "DETAIL") if k in options])
            found.append(Message("edition", where, code, message,
                                 sql_text(options["HINT"]) if "HINT" in options else None,
                                 sql_text(options["DETAIL"]) if "DETAIL" in options else None,
                                 texts))
    return found


# ---- the check -------------------------------------------------------------------------------

def placeholders(text):
    return None if text is None else re.sub(r"\{\w+\}", HOLE, text)


def main():
    catalog = tomllib.loads((repo / "sql" / "messages.toml").read_text())
    entries = catalog["message"]
    ids = [e["id"] for e in entries]
    for dup in sorted({i for i in ids if ids.count(i) > 1}):
        problems.append(f"sql/messages.toml: id {dup} twice")
    for e in entries:
        e["_m"], e["_h"], e["_d"] = (placeholders(e.get(k)) for k in ("message", "hint", "detail"))
        e["_used"] = {"rust": [], "edition": []}
    rust, edition = rust_messages(catalog), edition_messages()
    for msg in rust + edition:
        same = [e for e in entries if e["sqlstate"] == msg.sqlstate and unify(e["_m"], msg.message)]
        full = [e for e in same if optional_unify(e["_h"], msg.hint) and optional_unify(e["_d"], msg.detail)]
        if not full:
            lines = [f"{msg.where}: {msg.side} {msg.sqlstate} message has no catalog entry in sql/messages.toml:",
                     f"    message: {msg.show(msg.message)}",
                     f"    hint:    {msg.show(msg.hint)}",
                     f"    detail:  {msg.show(msg.detail)}"]
            for e in same:
                lines.append(f"  entry {e['id']} has that message but says hint: {e.get('hint')}; detail: {e.get('detail')}")
            problems.append("\n".join(lines))
            continue
        for e in full:
            if not e.get(msg.side, True):
                problems.append(f"{msg.where}: {msg.side} raises {e['id']}, which sql/messages.toml says it does not"
                                f" ({msg.side} = false)")
            e["_used"][msg.side].append(msg.where)
            for key in ("detail_variants", "hint_variants"):
                for variant in e.get(key, []):
                    if not any(unify(placeholders(variant), t) for t in msg.texts if t.strip(HOLE)):
                        problems.append(f"{msg.where}: {e['id']}: the {msg.side}'s function does not say"
                                        f" the {key[:-9]} {variant!r}")
    for e in entries:
        for side in ("rust", "edition"):
            if e.get(side, True) and not e["_used"][side]:
                problems.append(f"sql/messages.toml: entry {e['id']}: no {side} message matches it"
                                f" (message: {e['message']}; hint: {e.get('hint')}; detail: {e.get('detail')})")
    for frag in catalog.get("fragment", []):
        pattern = HOLE + placeholders(frag["text"]) + HOLE
        for side, texts in (("rust", RUST_TEXTS), ("edition", EDITION_TEXTS)):
            if not any(unify(pattern, t) for t in texts):
                problems.append(f"sql/messages.toml: fragment {frag['id']}: no {side} literal says {frag['text']!r}")
    shared = [e for e in entries if e.get("rust", True) and e.get("edition", True)]
    print(f"messages: {len(entries)} catalog entries ({len(shared)} shared,"
          f" {sum(1 for e in entries if not e.get('edition', True))} extension-only,"
          f" {sum(1 for e in entries if not e.get('rust', True))} edition-only);"
          f" {len(catalog.get('fragment', []))} fragments; {len(rust)} Rust messages and {len(edition)} edition RAISEs checked"
          f" (skipped, extension-only: {', '.join('src/' + s for s in catalog.get('skip_rust', []))})")
    for p in problems:
        print(f"messages: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
