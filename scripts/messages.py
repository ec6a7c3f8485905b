#!/usr/bin/env python3
"""Messages once (#35, #42): checks every error, warning and FATAL advlock raises -- the
extension's Rust (src/**/*.rs), the extension's own PL/pgSQL (sql/*.sql, shared with the SQL edition
where scripts/build_edition.sh builds them in) and the SQL edition's (edition/src/*.sql) --
against one catalog, sql/messages.toml (its header says what it lists and how). The `messages`
lint of scripts/lint.sh; scripts/messages_mutations.py proves it catches drift.

Why a strict lint and not a generator of the Rust constants: the messages are composed where they
are raised (the function name, the key, the holders), in files several people edit, some of which
(src/leases.rs, src/election.rs) are extension-only; a lint that reads every report site and fails
on any difference from the catalog keeps each text written in one place of truth without a build
step between the catalog and cargo, and says where the drift is.

Read:
  rust     src/**/*.rs: every Report::new(PgSqlErrorCode::X, msg) with its chained .detail()/.hint();
           the calls of a function that raises a Report built from its own parameters (errors.rs's
           invalid_argument, negative_older_than, require_preload, ...), once per call with the
           call's arguments put in; null_argument's messages (one per argument named in its hint's
           match arms, plus the `_` arm); idle_lock_timeout.rs's fatal(message, detail, hint)
           calls (FATAL 57P05). A string literal is its text; format!("...") its template, each
           {x}, {} or {:02X} a placeholder standing for its argument (a `const X: &str` is its
           text); a local `let x = <literal or format!>` is followed; counted(n, "a", "as") is
           "{n} {noun(n, "a", "as")}"; anything else is one placeholder standing for itself.
  sql      sql/*.sql (not the upgrade scripts): every RAISE with a message.
  edition  edition/src/*.sql as scripts/build_edition.py writes them out (-- @forms templates once
           per form), edition/move_to_extension.sql and the checks the built edition makes before
           it installs anything (edition/advlock_sql.sql before its first piece): every RAISE with a message (RAISE; re-raises are skipped): the format
           literal, each % a placeholder standing for its argument; USING ERRCODE (a condition
           name or an SQLSTATE), HINT, DETAIL, MESSAGE. A USING expression or argument is
           'literal', format('...') (each %s, %I, %L a placeholder for its argument), a
           concatenation of those with ||, or anything else: one placeholder for itself.

Matching: the catalog's literal text must be each side's literal text, word for word. Each
{placeholder} has a kind ([kind.*], by name in [placeholders]) that says which expressions of each
language may stand there (one pattern per language: what the Rust format argument or the PL/pgSQL
argument must be; `literal`: text a side may write out instead, e.g. a function name), or a
[[description]] whose texts it is (the key, the holders: an argument that writes the description
out inline must write one of its texts). A placeholder of a message's own `choice` table is one
of the texts listed: written out inline, or a placeholder whose every text the raising function
says. A message matches the entry of its SQLSTATE whose message, hint and detail all match (an
entry without hint or detail wants none). Fails when: a message matches no entry (it says which
entries of its SQLSTATE come closest); a side raises an entry not of its `sides`; an entry is not
raised by every side of its `sides`; a [[description]]'s function says a text the description does
not list, or not every text it lists.

Usage: scripts/messages.py [REPO]     (default: the repository holding this script)
"""
import importlib.util
import re
import sys
import tomllib
from pathlib import Path

HOLE = "\x00"  # a placeholder in a side's text; Text.exprs says what each stands for

# SQLSTATEs of the PgSqlErrorCode names and PL/pgSQL condition names used (teach it a new one).
RUST_CODES = {
    "ERRCODE_WARNING": "01000", "ERRCODE_NULL_VALUE_NOT_ALLOWED": "22004",
    "ERRCODE_INVALID_PARAMETER_VALUE": "22023", "ERRCODE_INVALID_TRANSACTION_STATE": "25000",
    "ERRCODE_ACTIVE_SQL_TRANSACTION": "25001", "ERRCODE_READ_ONLY_SQL_TRANSACTION": "25006",
    "ERRCODE_UNDEFINED_OBJECT": "42704", "ERRCODE_INSUFFICIENT_PRIVILEGE": "42501",
    "ERRCODE_OUT_OF_MEMORY": "53200", "ERRCODE_PROGRAM_LIMIT_EXCEEDED": "54000",
    "ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE": "55000",
    "ERRCODE_LOCK_NOT_AVAILABLE": "55P03", "ERRCODE_INTERNAL_ERROR": "XX000",
}
SQL_CODES = {
    "null_value_not_allowed": "22004", "invalid_parameter_value": "22023",
    "read_only_sql_transaction": "25006", "insufficient_privilege": "42501",
    "out_of_memory": "53200", "program_limit_exceeded": "54000", "lock_not_available": "55P03",
}
# Functions that raise what their arguments say, without a Report: name -> SQLSTATE.
RAW_REPORTERS = {"fatal": "57P05"}
LANG = {"rust": "rust", "sql": "sql", "edition": "sql"}  # the language of each side


class Text:
    """A message text: literal characters and placeholders (HOLE), exprs[i] the source
    expression the i-th placeholder stands for."""

    def __init__(self, s, exprs=()):
        self.s, self.exprs = s, list(exprs)
        assert s.count(HOLE) == len(self.exprs), (s, exprs)

    def __add__(self, other):
        return Text(self.s + other.s, self.exprs + other.exprs)

    def show(self):
        out, exprs = [], iter(self.exprs)
        for c in self.s:
            out.append("{" + next(exprs) + "}" if c == HOLE else c)
        return "".join(out)


class Message:
    def __init__(self, side, where, sqlstate, message, hint=None, detail=None, texts=()):
        self.side, self.where, self.sqlstate = side, where, sqlstate
        self.message, self.hint, self.detail = message, hint, detail
        self.texts = list(texts)  # the texts of the function that raises it (for choices)


class Checker:
    def __init__(self, repo):
        self.repo = Path(repo)
        self.catalog = tomllib.loads((self.repo / "sql" / "messages.toml").read_text())
        self.kinds = self.catalog.get("kind", {})
        self.names = self.catalog.get("placeholders", {})
        self.descriptions = {d["id"]: d for d in self.catalog.get("description", [])}
        self.problems = []
        for name, kind in self.names.items():
            if kind not in self.kinds and kind not in self.descriptions:
                self.problems.append(f"sql/messages.toml: placeholder {name}: no kind or description {kind}")

    # ---- matching ----------------------------------------------------------------------------

    def compile(self, pattern, choices):
        """(regex, groups): the catalog text as a regex over a side's text, one named group per
        placeholder (groups: group name -> placeholder name)."""
        groups = {}

        def build(text):
            out, pos = [], 0
            for m in re.finditer(r"\{(\w+)\}", text):
                out.append(re.escape(text[pos:m.start()]))
                pos = m.end()
                name = m.group(1)
                g = f"g{len(groups)}"
                groups[g] = name
                if name in choices:
                    alts = [build(v) for v in choices[name]]
                    out.append(f"(?P<{g}>{HOLE}|" + "|".join(f"(?:{a})" for a in alts) + ")")
                    continue
                kind = self.kinds.get(self.names.get(name, ""), {})
                lit = kind.get("literal")
                out.append(f"(?P<{g}>{HOLE}|{lit})" if lit else f"(?P<{g}>{HOLE})")
            out.append(re.escape(text[pos:]))
            return "".join(out)

        return re.compile(build(pattern), re.S), groups

    def unify(self, pattern, text, side, choices=None, texts=()):
        """None when text (a Text of side) is an instance of the catalog's pattern, else why not."""
        if pattern is None or text is None:
            return None if pattern is None and text is None else "one has it, the other not"
        choices = choices or {}
        regex, groups = self.compile(pattern, choices)
        m = regex.fullmatch(text.s)
        if not m:
            return "the words differ"
        for g, name in groups.items():
            if m.start(g) < 0 or m.group(g) != HOLE:
                continue
            expr = text.exprs[text.s.count(HOLE, 0, m.start(g))]
            if name in choices:
                said = list(texts) + literals_in(expr, LANG[side])
                for variant in choices[name]:
                    if variant and not any(self.unify(variant, t, side, choices) is None for t in said):
                        return f"{{{name}}} ({expr}): the raising function does not say {variant!r}"
                continue
            why = self.placeholder_fits(name, expr, side)
            if why:
                return why
        return None

    def placeholder_fits(self, name, expr, side):
        kind_name = self.names.get(name)
        if kind_name is None:
            return f"{{{name}}}: no kind in [placeholders]"
        lang = LANG[side]
        if kind_name in self.descriptions:  # the formatter's call, or the description inline
            d = self.descriptions[kind_name]
            if re.fullmatch(d[f"{lang}_call"], expr, re.S):
                return None
            inline = rust_text(expr, None) if lang == "rust" else sql_text(expr)
            if inline.s != HOLE and any(self.unify(t, inline, side) is None for t in d["texts"]):
                return None
            return f"{{{name}}} is {expr!r}, which is not a {kind_name} description (a call of {d[f'{lang}_call']!r} or one of its texts)"
        kind = self.kinds[kind_name]
        if not re.fullmatch(kind[lang], expr, re.S):
            return f"{{{name}}} is {expr!r}, not a {kind_name} in {lang} ({kind[lang]!r})"
        return None

    # ---- the check ---------------------------------------------------------------------------

    def run(self):
        entries = self.catalog["message"]
        ids = [e["id"] for e in entries]
        for dup in sorted({i for i in ids if ids.count(i) > 1}):
            self.problems.append(f"sql/messages.toml: id {dup} twice")
        used = {e["id"]: {"rust": [], "sql": [], "edition": []} for e in entries}
        self.rust_texts = {}
        found = (rust_messages(self) + sql_messages(self, "sql") + sql_messages(self, "edition"))
        if DUMP:
            for msg in found:
                print(f"{msg.where} [{msg.side} {msg.sqlstate}]\n  M {show(msg.message)}\n  H {show(msg.hint)}\n  D {show(msg.detail)}")
        for msg in found:
            full, near = [], []
            for e in entries:
                if e["sqlstate"] != msg.sqlstate:
                    continue
                choices = e.get("choice", {})
                whys = [(k, self.unify(e.get(k), getattr(msg, k), msg.side, choices, msg.texts))
                        for k in ("message", "hint", "detail")]
                bad = [(k, w) for k, w in whys if w]
                if not bad:
                    full.append(e)
                elif len(bad) < 3:
                    near.append((len(bad), e, bad))
            if not full:
                lines = [f"{msg.where}: {msg.side} {msg.sqlstate} message has no catalog entry in sql/messages.toml:",
                         f"    message: {show(msg.message)}", f"    hint:    {show(msg.hint)}",
                         f"    detail:  {show(msg.detail)}"]
                for _, e, bad in sorted(near, key=lambda x: x[0])[:3]:
                    lines.append(f"  nearest entry {e['id']}: " + "; ".join(f"{k}: {w}" for k, w in bad))
                self.problems.append("\n".join(lines))
                continue
            for e in full:
                if msg.side not in e.get("sides", ["rust", "edition"]):
                    self.problems.append(f"{msg.where}: {msg.side} raises {e['id']}, whose sides are"
                                         f" {e.get('sides', ['rust', 'edition'])} in sql/messages.toml")
                used[e["id"]][msg.side].append(msg.where)
        for e in entries:
            for side in e.get("sides", ["rust", "edition"]):
                if not used[e["id"]][side]:
                    self.problems.append(f"sql/messages.toml: entry {e['id']}: no {side} message matches it"
                                         f" (message: {e['message']}; hint: {e.get('hint')}; detail: {e.get('detail')})")
        for d in self.descriptions.values():
            self.check_description(d)
        print(f"messages: {len(entries)} catalog entries, {len(self.descriptions)} descriptions;"
              f" {sum(1 for m in found if m.side == 'rust')} Rust messages,"
              f" {sum(1 for m in found if m.side == 'sql')} extension SQL RAISEs and"
              f" {sum(1 for m in found if m.side == 'edition')} edition RAISEs checked")
        for p in self.problems:
            print(f"messages: {p}")
        return 1 if self.problems else 0

    def check_description(self, d):
        """The formatter of each side says exactly the description's texts."""
        path = d["rust"].split()[0]
        sides = [("rust", path, rust_function_texts(self, d["rust"]))]
        for name in d["edition"]:
            rel, said = edition_function_texts(self, name)
            sides.append(("edition", rel or name, said))
        for side, where, said in sides:
            if said is None:
                self.problems.append(f"sql/messages.toml: description {d['id']}: {side} formatter {where} not found")
                continue
            said = [t for t in said if re.search(r"[A-Za-z]", t.s)]
            for t in said:
                if not any(self.unify(p, t, side) is None for p in d["texts"]):
                    self.problems.append(f"{where}: description {d['id']}: the {side} formatter says"
                                         f" {t.show()!r}, which sql/messages.toml does not list")
            for p in d["texts"]:
                if not any(self.unify(p, t, side) is None for t in said):
                    self.problems.append(f"{where}: description {d['id']}: the {side} formatter does not say {p!r}")


def literals_in(expr, lang):
    """The string literals of an expression, as Texts."""
    if lang == "sql":
        return [Text(t.replace("''", "'")) for t in re.findall(r"'((?:[^']|'')*)'", expr)]
    blank = rust_blank(expr)
    out, i = [], 0
    while True:
        m = LITERAL_START.search(blank, i)
        if not m:
            return out
        text, i = rust_literal(expr, m.start())
        out.append(Text(text))


def show(text):
    return None if text is None else text.show()


# ---- Rust ------------------------------------------------------------------------------------

def rust_literal(src, i):
    """(text, end) of the Rust string literal at src[i] ("...", r#"..."#, b"...", c"...")."""
    if src[i] in "bc":
        i += 1
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
            esc = re.match(r"x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}", src[j + 1:j + 12])
            if esc:
                out.append(chr(int(esc.group(0).strip("xu{}"), 16)))
                j += 1 + len(esc.group(0))
                continue
            out.append({"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}[c])
            j += 2
        else:
            out.append(src[j])
            j += 1
    return "".join(out), j + 1


LITERAL_START = re.compile(r'(?<![\w\'])(?:[bc]?r#*|[bc])?"')
CHAR_LITERAL = re.compile(r"'(\\.|\\u\{[0-9a-fA-F]+\}|[^\\'])'")


def rust_blank(src):
    """src with comments and the contents of string and char literals blanked (same length):
    for finding calls, braces and `fn`s without being fooled by text."""
    out, i, n = list(src), 0, len(src)
    while i < n:
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out[i:j] = " " * (j - i)
            i = j
        elif src.startswith("/*", i):
            j = src.index("*/", i) + 2
            out[i:j] = [c if c == "\n" else " " for c in src[i:j]]
            i = j
        elif LITERAL_START.match(src, i) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            _, j = rust_literal(src, i)
            start = src.index('"', i)
            out[start + 1:j - 1] = [c if c == "\n" else " " for c in src[start + 1:j - 1]]
            i = j
        elif src[i] == "'" and CHAR_LITERAL.match(src, i):
            j = CHAR_LITERAL.match(src, i).end()
            out[i + 1:j - 1] = " " * (j - i - 2)
            i = j
        else:
            i += 1
    return "".join(out)


def rust_args(src, blank, i):
    """The top-level arguments (source text) of the call whose '(' is at src[i], and the end."""
    assert blank[i] == "("
    args, depth, start, j = [], 0, i + 1, i
    while True:
        c = blank[j]
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


class RustFile:
    def __init__(self, path, rel):
        self.src = path.read_text()
        self.rel = rel
        self.blank = rust_blank(self.src)
        self.consts = {m.group(1): rust_literal(self.src, m.start(2))[0]
                       for m in re.finditer(r'\bconst\s+(\w+)\s*:\s*&(?:\'static\s+)?str\s*=\s*(")', self.src)}
        self.calls = {}  # function name -> its calls here (calls_of)
        self.fns = []  # (name, params, body start, body end)
        for m in re.finditer(r"\bfn\s+(\w+)\s*(?:<[^>]*>)?\s*\(", self.blank):
            params, end = rust_args(self.src, self.blank, m.end() - 1)
            body = self.blank.find("{", end)
            semi = self.blank.find(";", end)
            if body < 0 or (0 <= semi < body):
                continue
            depth, j = 0, body
            while True:
                depth += {"{": 1, "}": -1}.get(self.blank[j], 0)
                if depth == 0:
                    break
                j += 1
            # The parameters that carry text: a report built from one is read at the calls.
            names = [re.sub(r"^mut\s+", "", p.split(":")[0].strip()) for p in params
                     if re.fullmatch(r"[^:]+:\s*(&(\'\w+\s+)?str|impl Into<String>|String)", p.strip())]
            self.fns.append((m.group(1), names, body, j + 1))

    def calls_of(self, name):
        """The matches of `name(` here that are calls (not its definition); kept per file, which
        PARSED keeps per text."""
        if name not in self.calls:
            self.calls[name] = [m for m in re.finditer(rf"(?<![\w.]){name}\(", self.blank)
                                if not re.search(r"(?<![\w.])fn\s+$", self.blank[max(0, m.start() - 80):m.start()])]
        return self.calls[name]

    def line(self, i):
        return self.src.count("\n", 0, i) + 1

    def enclosing(self, i):
        inner = [f for f in self.fns if f[2] <= i < f[3]]
        return min(inner, key=lambda f: f[3] - f[2]) if inner else None

    def literals(self, start, end):
        """Every string literal of src[start:end] as a Text (format templates with their holes)."""
        return [template_text(text, format_args(self, at), (self, at)) for at, text in self.literal_spans(start, end)]

    def literal_spans(self, start, end):
        """(position, text) of each string literal of src[start:end]."""
        out, i = [], start
        while True:
            m = LITERAL_START.search(self.blank, i, end)
            if not m:
                return out
            text, i = rust_literal(self.src, m.start())
            out.append((m.start(), text))


def template_text(template, args, scope=None):
    """A format! template as a Text: each {...} a placeholder for its argument."""
    positional = [a for a in args if not re.match(r"\w+\s*=[^=]", a)]
    named = dict(re.match(r"(\w+)\s*=\s*(.*)", a, re.S).groups() for a in args if re.match(r"\w+\s*=[^=]", a))
    out, nxt = [], iter(positional)
    pos = 0
    result = Text("")
    for m in re.finditer(r"\{\{|\}\}|\{([^{}:]*)(?::[^{}]*)?\}", template):
        out.append(template[pos:m.start()])
        pos = m.end()
        if m.group(0) in ("{{", "}}"):
            out.append(m.group(0)[0])
            continue
        name = m.group(1).strip()
        if not name:
            expr = next(nxt, "?")
        elif name.isdigit():
            expr = positional[int(name)] if int(name) < len(positional) else "?"
        else:
            expr = named.get(name, name)
        result += Text("".join(out))
        out = []
        result += rust_text(expr, scope)
    result += Text("".join(out) + template[pos:])
    return result


def rust_text(expr, scope, depth=0):
    """The Text of a message, detail or hint expression: literals and format! templates written
    out, locals and &str consts followed, anything else one placeholder for itself."""
    expr = expr.strip()
    expr = re.sub(r"\.(to_string|to_owned|into)\(\)$", "", expr).lstrip("&").strip()
    if re.fullmatch(r'r?#*".*', expr, re.S):
        text, end = rust_literal(expr, 0)
        if end == len(expr):
            return Text(text)
    m = re.match(r"format!\s*\(", expr)
    if m:
        blank = rust_blank(expr)
        args, _ = rust_args(expr, blank, m.end() - 1)
        return template_text(rust_literal(args[0], 0)[0], args[1:], scope)
    m = re.fullmatch(r"(?:crate::errors::)?counted\((.*)\)", expr, re.S)
    if m:
        args, _ = rust_args(f"({m.group(1)})", rust_blank(f"({m.group(1)})"), 0)
        return Text(HOLE + " " + HOLE, [args[0], f"noun({', '.join(args)})"])
    if scope is not None and re.fullmatch(r"\w+", expr) and depth < 4:
        file, at = scope
        if expr in file.consts:
            return Text(file.consts[expr])
        fn = file.enclosing(at)
        if fn:
            lets = [m for m in re.finditer(rf"\blet\s+{expr}\s*(?::[^=]*)?=", file.blank[fn[2]:at])]
            if lets:
                start = fn[2] + lets[-1].end()
                end, level = start, 0
                while level or file.blank[end] != ";":
                    level += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(file.blank[end], 0)
                    end += 1
                value = file.src[start:end].strip()
                if re.match(r'(?:[bc]?r#*|[bc])?"|format!|(?:crate::errors::)?counted\(', value):
                    return rust_text(value, (file, start), depth + 1)
    return Text(HOLE, [re.sub(r"\s+", " ", expr)])


def substitute(text, params, args):
    """text with each placeholder that stands for one of params replaced by that argument's Text."""
    out = Text("")
    exprs = iter(text.exprs)
    for c in text.s:
        if c != HOLE:
            out += Text(c)
            continue
        expr = next(exprs)
        out += args[params.index(expr)] if expr in params and params.index(expr) < len(args) else Text(HOLE, [expr])
    return out


PARSED = {}  # (relative path, text) -> RustFile: the mutation test reads the same files many times


def rust_files(repo):
    out = []
    for p in sorted((repo / "src").rglob("*.rs")):
        rel = str(p.relative_to(repo))
        key = (rel, p.read_text())
        if key not in PARSED:
            PARSED[key] = RustFile(p, rel)
        out.append(PARSED[key])
    return out


def rust_messages(checker):
    files = rust_files(checker.repo)
    checker.rust_files = files
    found, wrappers = [], []  # wrappers: (fn name, its text parameters, Message with their placeholders)
    for f in files:
        for m in re.finditer(r"(?<![\w])Report::new\(", f.blank):
            args, end = rust_args(f.src, f.blank, m.end() - 1)
            fn = f.enclosing(m.start())
            if fn and fn[0] == "null_argument":
                continue  # read below
            code = args[0].split("::")[-1]
            where = f"{f.rel}:{f.line(m.start())}"
            if code not in RUST_CODES:
                checker.problems.append(f"{where}: unknown error code {code} (teach scripts/messages.py)")
                continue
            scope = (f, m.start())
            msg = Message("rust", where, RUST_CODES[code], rust_text(args[1], scope),
                          texts=f.literals(fn[2], fn[3]) if fn else ())
            while True:
                c = re.match(r"\s*\.(detail|hint|raise|warn)\(", f.blank[end:])
                if not c:
                    break
                cargs, end = rust_args(f.src, f.blank, end + c.end() - 1)
                if c.group(1) in ("detail", "hint"):
                    setattr(msg, c.group(1), rust_text(cargs[0], (f, end)))
            holes = [e for t in (msg.message, msg.hint, msg.detail) if t for e in t.exprs]
            if fn and any(e in fn[1] for e in holes) and calls_of(files, fn[0]):
                wrappers.append((fn[0], fn[1], msg))  # raised from its parameters: read at each call
                continue
            found.append(msg)
        if f.rel == "src/errors.rs":
            found.extend(null_argument_messages(f))
    for name, params, body in wrappers:
        for f, m in calls_of(files, name):
            args, _ = rust_args(f.src, f.blank, m.end() - 1)
            texts = [rust_text(a, (f, m.start())) for a in args]
            fn = f.enclosing(m.start())
            msg = Message("rust", f"{f.rel}:{f.line(m.start())}", body.sqlstate,
                          substitute(body.message, params, texts),
                          body.hint and substitute(body.hint, params, texts),
                          body.detail and substitute(body.detail, params, texts),
                          (f.literals(fn[2], fn[3]) if fn else []) + body.texts)
            msg.body = body  # the report the call fills in
            found.append(msg)
    for name, code in RAW_REPORTERS.items():
        for f, m in calls_of(files, name):
            args, _ = rust_args(f.src, f.blank, m.end() - 1)
            texts = [rust_text(a, (f, m.start())) for a in args]
            fn = f.enclosing(m.start())
            found.append(Message("rust", f"{f.rel}:{f.line(m.start())}", code, texts[0], texts[2], texts[1],
                                 f.literals(fn[2], fn[3]) if fn else []))
    return found


def calls_of(files, name):
    """The calls of function name: (file, match of `name(`), its definition left out."""
    return [(f, m) for f in files for m in f.calls_of(name)]


def null_argument_messages(f):
    """One message per argument null_argument names in its hint's match, and the `_` arm."""
    start = f.src.index("pub fn null_argument(")
    body = f.src[start:f.src.index("\n}\n", start)]
    m = re.search(r"format!\(\s*(\"(?:\\.|[^\"\\])*\")", body)
    template = rust_literal(m.group(1), 0)[0]
    out = []
    for arm in re.finditer(r"\n\s*((?:\"\w+\"\s*\|\s*)*\"\w+\"|_)\s*=>\s*\{?\s*(\"(?:\\.|[^\"\\])*\")", body):
        hint = rust_literal(arm.group(2), 0)[0]
        names = re.findall(r"\"(\w+)\"", arm.group(1)) or [None]
        for name in names:
            text = template.replace("{argument}", name) if name else template
            out.append(Message("rust", f"{f.rel}:{f.line(start + arm.start()) + 1} (null_argument, {name or '_'})",
                               "22004", template_text(text, []), Text(hint)))
    return out


def rust_function_texts(checker, spec):
    """The literals (Texts) of the Rust function spec ("src/file.rs fn_name")."""
    path, name = spec.split()
    for f in getattr(checker, "rust_files", None) or rust_files(checker.repo):
        if f.rel == path:
            for fn in f.fns:
                if fn[0] == name:
                    return [template_text(text, format_args(f, at), (f, at))
                            for at, text in f.literal_spans(fn[2], fn[3])]
    return None


def format_args(f, i):
    """The arguments after the template at src[i], when it is a format!'s template."""
    m = re.search(r"format!\s*\(\s*$", f.blank[:i])
    if not m:
        return []
    args, _ = rust_args(f.src, f.blank, f.blank.rindex("(", 0, i))
    return args[1:]


# ---- PL/pgSQL (the extension's sql/ and the SQL edition) -------------------------------------

def sql_split(text, sep_re, maxsplit=0):
    """Splits text at the top-level matches of sep_re (outside '...' and parentheses); at most
    maxsplit times when it is not 0 (the rest is the last part), as str.split does."""
    parts, depth, start, i = [], 0, 0, 0
    sep = re.compile(sep_re, re.I)
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
            m = sep.match(text, i)
            if m and m.end() > i:
                parts.append(text[start:i])
                start = i = m.end()
                if len(parts) == maxsplit:
                    break
                continue
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def sql_literal(expr):
    m = re.fullmatch(r"'((?:[^']|'')*)'", expr.strip(), re.S)
    return m.group(1).replace("''", "'") if m else None


def sql_format(fmt, args, pattern=r"%%|%[sIL]"):
    """A format string as a Text, each % placeholder standing for its argument."""
    out, pos, args = Text(""), 0, iter(args)
    for m in re.finditer(pattern, fmt):
        out += Text(fmt[pos:m.start()])
        pos = m.end()
        out += Text("%") if m.group(0) == "%%" else Text(HOLE, [re.sub(r"\s+", " ", next(args, "?"))])
    return out + Text(fmt[pos:])


def sql_text(expr):
    """The Text of a USING expression or an argument."""
    expr = re.sub(r"OPERATOR\(pg_catalog\.\|\|\)", "||", expr)
    out = Text("")
    for part in sql_split(expr, r"\|\|"):
        lit = sql_literal(part)
        m = re.fullmatch(r"(?:pg_catalog\.)?format\((.*)\)", part, re.S)
        if lit is not None:
            out += Text(lit)
        elif m and sql_literal(sql_split(m.group(1), ",")[0]) is not None:
            args = sql_split(m.group(1), ",")
            out += sql_format(sql_literal(args[0]), args[1:])
        else:
            out += Text(HOLE, [re.sub(r"\s+", " ", part)])
    return out


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


def sql_parenthesised(text, i):
    """What the parentheses opening at text[i] enclose."""
    depth, j = 0, i
    while True:
        c = text[j]
        if c == "'":
            j = text.index("'", j + 1)
            while text[j + 1:j + 2] == "'":
                j = text.index("'", j + 2)
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return text[i + 1:j]
        j += 1


def sql_said(body):
    """What a PL/pgSQL function body says: its format templates and the literals it returns or
    assigns (THEN, ELSE, RETURN, :=), as Texts."""
    body = sql_without_comments(body)
    out = []
    for m in re.finditer(r"(?:pg_catalog\.)?format\(", body):
        args = sql_split(sql_parenthesised(body, m.end() - 1), ",")
        if sql_literal(args[0]) is not None:
            out.append(sql_format(sql_literal(args[0]), args[1:]))
    for m in re.finditer(r"(?:\bTHEN|\bELSE|\bRETURN|:=)\s*('(?:[^']|'')*')", body, re.I):
        out.append(Text(sql_literal(m.group(1))))
    return out


def expand_forms_of(repo):
    """build_edition.expand_forms of the repository checked: the edition's RAISEs are read as the
    build writes them, each -- @forms template once per form (a placeholder can be in a RAISE)."""
    spec = importlib.util.spec_from_file_location("build_edition", repo / "scripts" / "build_edition.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.expand_forms


def sql_sources(repo, side):
    if side == "edition":
        expand = expand_forms_of(repo)
        for path in sorted((repo / "edition" / "src").glob("*.sql")):
            rel = f"edition/src/{path.name}"
            src, origins = expand(path.read_text(), rel)
            yield rel, src, origins
        # The move to the extension, and the checks the built script makes before it installs
        # anything (written by scripts/build_edition.py: the text before its first piece).
        src = (repo / "edition" / "move_to_extension.sql").read_text()
        yield "edition/move_to_extension.sql", src, list(range(1, src.count("\n") + 2))
        src = (repo / "edition" / "advlock_sql.sql").read_text().partition("\n-- ---- ")[0]
        yield "edition/advlock_sql.sql", src, list(range(1, src.count("\n") + 2))
    else:
        for path in sorted((repo / "sql").glob("*.sql")):
            if path.name.startswith("advlock--"):
                continue  # upgrade scripts: what the install scripts (these files) say, again
            src = path.read_text()
            yield f"sql/{path.name}", src, list(range(1, src.count("\n") + 2))


def function_body(src, at):
    start = src.rfind("CREATE ", 0, at)
    return src[start:at]


def sql_messages(checker, side):
    found = []
    for rel, src, origins in sql_sources(checker.repo, side):
        for m in re.finditer(r"\bRAISE\b", src):
            if "--" in src[src.rfind("\n", 0, m.start()) + 1:m.start()]:
                continue  # a comment
            stmt = sql_split(src[m.end():], r";", 1)[0]
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
                parts = sql_split(head, r",")
                message = sql_format(sql_literal(parts[0]), parts[1:], r"%%|%")
            else:
                message = sql_text(options.get("MESSAGE", "''"))
            if "ERRCODE" in options:
                name = sql_literal(options["ERRCODE"])
                if re.fullmatch(r"[0-9A-Z]{5}", name):
                    code = name
                elif name in SQL_CODES:
                    code = SQL_CODES[name]
                else:
                    checker.problems.append(f"{where}: unknown condition {name} (teach scripts/messages.py)")
                    continue
            else:
                code = {"WARNING": "01000", "EXCEPTION": "P0001"}.get(level_word, "00000")
            found.append(Message(side, where, code, message,
                                 sql_text(options["HINT"]) if "HINT" in options else None,
                                 sql_text(options["DETAIL"]) if "DETAIL" in options else None,
                                 sql_said(function_body(src, m.start()))))
    return found


def edition_function_texts(checker, name):
    """(file, what it says) of the edition's function name."""
    for rel, src, _ in sql_sources(checker.repo, "edition"):
        m = re.search(rf"CREATE OR REPLACE FUNCTION @extschema@\.{name}\(", src)
        if m:
            end = src.find("\nCREATE ", m.end())
            return rel, sql_said(src[m.start():end if end > 0 else len(src)])
    return None, None


DUMP = False


def main():
    global DUMP
    args = sys.argv[1:]
    DUMP = "--dump" in args
    args = [a for a in args if a != "--dump"]
    repo = Path(args[0] if args else Path(__file__).resolve().parents[1])
    return Checker(repo).run()


if __name__ == "__main__":
    sys.exit(main())
