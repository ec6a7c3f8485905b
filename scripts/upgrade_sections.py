#!/usr/bin/env python3
"""Regenerates the parts of an upgrade script that must equal a fresh install: the new C
functions (from `cargo pgrx schema`), the hand-written SQL of the new objects, and
sql/comments.sql. pg_test/upgrade proves the result equals a fresh install, catalog by catalog.

Usage: cargo pgrx schema pg17 -o /tmp/schema.sql && scripts/upgrade_sections.py VERSION /tmp/schema.sql
  VERSION 0.6.0 writes sql/advlock--0.5.0--0.6.0.sql, this release's one upgrade script; 0.5.0,
  0.4.0 and 0.3.0 rewrite the released sql/advlock--0.4.0--0.5.0.sql, sql/advlock--0.3.0--0.4.0.sql
  and sql/advlock--0.2.0--0.3.0.sql
"""
import re
import sys
from pathlib import Path

repo = Path(__file__).resolve().parent.parent
version = sys.argv[1]
schema = Path(sys.argv[2]).read_text()
blocks = re.findall(r"/\* <begin connected objects> \*/\n(.*?)/\* </end connected objects> \*/", schema, re.S)
begin, end = "-- <generated: new objects>\n", "-- </generated: new objects>\n"
comments = (repo / "sql/comments.sql").read_text()


def function_blocks(new, replaced=()):
    """The CREATE FUNCTION blocks of `new` (and, as CREATE OR REPLACE, of `replaced`), sorted,
    without pgrx's source-location lines (src/x.rs:NN changes with every edit)."""
    names = "|".join(tuple(new) + tuple(replaced))
    found = [b for b in blocks if re.search(r'^CREATE  FUNCTION "(%s)"' % names, b, re.M)]
    if replaced:
        found = [re.sub(r'^CREATE  FUNCTION "(%s)"' % "|".join(replaced), r'CREATE OR REPLACE FUNCTION "\1"', b, flags=re.M)
                 for b in found]
    found.sort(key=lambda b: (re.search(r'FUNCTION "(\w+)"', b).group(1), b))
    return ["".join(line for line in b.splitlines(True) if not re.match(r"-- src/", line)) for b in found]


if version == "0.6.0":
    script = repo / "sql/advlock--0.5.0--0.6.0.sql"
    # What 0.6.0 adds to 0.5.0's SQL objects, in install order: advlock_fence in Rust (src/fences.rs,
    # bench case 11) -- the PL/pgSQL it calls for everything but a pass, advlock_fence_checked
    # (sql/fence.sql, new), then pgrx's "fence_hot_path" block: the three advlock_fence replaced in
    # place by the Rust ones (CREATE OR REPLACE keeps their privileges, comments and dependants)
    # and the guard trigger's Rust function; then the guard trigger on it, replaced in place (no
    # WHEN). Every comment is re-applied (sql/comments.sql, whole), so a changed description
    # reaches updated installs.
    checked = re.findall(r"^CREATE FUNCTION @extschema@\.advlock_fence_checked\(.*?\n\$fn\$;\n",
                         (repo / "sql/fence.sql").read_text(), re.S | re.M)
    assert len(checked) == 3, checked
    hot = next(b for b in blocks if "CREATE FUNCTION @extschema@.advlock_fence_update_check" in b)
    hot = "".join(line for line in hot.splitlines(True) if not re.match(r"-- src/", line))
    assert hot.count("CREATE FUNCTION @extschema@.advlock_fence(") == 3, hot
    hot = hot.replace("CREATE FUNCTION @extschema@.advlock_fence(", "CREATE OR REPLACE FUNCTION @extschema@.advlock_fence(")
    trigger = re.search(r"^CREATE TRIGGER advlock_fences_guard .*?;\n", (repo / "sql/fence_table.sql").read_text(),
                        re.S | re.M).group(0).replace("CREATE TRIGGER", "CREATE OR REPLACE TRIGGER", 1)
    header = script.read_text().partition(begin)[0].partition("-- One-line descriptions for \\df+")[0]
    script.write_text(header + begin + "".join(c + "\n" for c in checked) + hot + "\n" + trigger + end + "\n" + comments)
    print(f"{script.relative_to(repo)}: advlock_fence_checked, the fence's hot path, the guard trigger, comments")
    sys.exit(0)
if version == "0.5.0":
    script = repo / "sql/advlock--0.4.0--0.5.0.sql"
    # What 0.5.0 adds to 0.4.0's SQL objects, in install order: the C functions pgrx generates
    # (their CREATE FUNCTION blocks, from the schema) and the hand-written SQL files of new
    # objects (whole files). Objects 0.4.0 had and 0.5.0 changes are replaced in place here too.
    # advlock_metrics(): one more column (idle_terminations); the header drops it and its view.
    NEW_FUNCTIONS = ("advlock_lease_expiry", "advlock_metrics", "advlock_campaign", "advlock_leader",
                     "advlock_observe_leader", "advlock_resign", "advlock_lease_candidates", "advlock_term_stats")
    NEW_SQL_FILES = ("sql/fence.sql", "sql/fence_table.sql", "sql/lease_check.sql", "sql/metrics.sql")
    VIEW_FILES = ("sql/holders.sql", "sql/stats.sql", "sql/metrics.sql", "sql/leases.sql", "sql/lock_table.sql")
    functions = function_blocks(NEW_FUNCTIONS) if NEW_FUNCTIONS else []
    files = [(repo / f).read_text() for f in NEW_SQL_FILES]
    # Leader election (src/election.rs): its two procedures (pgrx's "election_waits" block), then
    # the lease views with the election's columns appended, replaced in place (CREATE OR REPLACE
    # VIEW keeps their privileges and the views users built on them).
    election = next(b for b in blocks if "CREATE PROCEDURE @extschema@.advlock_wait_campaign" in b)
    files.append("".join(line for line in election.splitlines(True) if not re.match(r"-- src/", line)))
    lease_views = re.findall(r"^CREATE VIEW @extschema@\.advlock_lease\w* AS\n.*?;\n",
                             (repo / "sql/leases.sql").read_text(), re.S | re.M)
    assert len(lease_views) == 2, lease_views
    files.append("".join(v.replace("CREATE VIEW", "CREATE OR REPLACE VIEW", 1) for v in lease_views))
    # advlock_idle_holder_rows: its hidden-holder WARNING says "1 backend" / "N backends" (0.4.0:
    # "backend(s)"); replaced in place, as for the views.
    idle_rows = re.search(r"^CREATE FUNCTION @extschema@\.advlock_idle_holder_rows\(.*?\n\$fn\$;\n",
                          (repo / "sql/holders.sql").read_text(), re.S | re.M).group(0)
    files.append(idle_rows.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))
    # The views' descriptions, which live beside each view in the hand-written files: all
    # re-applied, so a changed one reaches updated installs (0.5.0: advlock_lock_table's, ASCII).
    views = "".join(m.group(0) for f in VIEW_FILES
                    for m in re.finditer(r"^COMMENT ON VIEW @extschema@\.\w+ IS\n.*?';\n", (repo / f).read_text(), re.S | re.M))
    # The hand-written header, then the generated objects and the views' descriptions, then every
    # other comment (sql/comments.sql, re-applied whole for the same reason).
    header = script.read_text().partition(begin)[0].partition("-- One-line descriptions for \\df+")[0]
    script.write_text(header + begin + "".join(part + "\n" for part in functions + files) + views + end + "\n" + comments)
    print(f"{script.relative_to(repo)}: {len(functions)} new functions, {len(files)} SQL files, "
          f"{views.count('COMMENT ON VIEW')} view descriptions, comments")
    sys.exit(0)
if version == "0.4.0":
    script = repo / "sql/advlock--0.3.0--0.4.0.sql"
    functions = function_blocks(("advlock_lease", "advlock_lease_renew", "advlock_lease_release",
                                 "advlock_lease_entries", "advlock_lease_stats",
                                 "advlock_lock_table_entries"))
    leases = (repo / "sql/leases.sql").read_text()
    lock_table = (repo / "sql/lock_table.sql").read_text()
    # advlock_holders from its view on: the new function created, the view and the
    # functions 0.3.0 already had replaced in place (keeping privileges, comments, dependants).
    holders = (repo / "sql/holders.sql").read_text()
    holders = holders[holders.index("-- One row per advisory lock entry in the current database, holders and waiters alike"):]
    for name in ("VIEW @extschema@.advlock_holders AS", "FUNCTION @extschema@.advlock_idle_holders(",
                 "FUNCTION @extschema@.advlock_terminate_idle_holders("):
        assert "CREATE " + name in holders, name
        holders = holders.replace("CREATE " + name, "CREATE OR REPLACE " + name, 1)
    procedures = next(b for b in blocks if "CREATE PROCEDURE @extschema@.advlock_wait_lock" in b)
    procedures = "".join(line for line in procedures.splitlines(True) if not re.match(r"-- src/", line))
    # advlock_holder_entries: a hand-written C entry point, declared by extension_sql! too.
    feed = next(b for b in blocks if "CREATE FUNCTION @extschema@.advlock_holder_entries" in b)
    procedures += "\n" + "".join(line for line in feed.splitlines(True) if not re.match(r"-- src/", line))
    # The hand-written header, then the generated objects, then every comment.
    header = script.read_text().partition(begin)[0].partition("-- One-line descriptions for \\df+")[0]
    script.write_text(header + begin + "\n".join(functions) + "\n" + procedures + "\n" + leases + "\n"
                      + holders + "\n" + lock_table + end + "\n" + comments)
    print(f"{script.relative_to(repo)}: {len(functions)} new functions, 2 procedures, advlock_holder_entries, sql/leases.sql, "
          "sql/holders.sql from the view on, sql/lock_table.sql, comments")
    sys.exit(0)
assert version == "0.3.0", f"unknown version {version}"
script = repo / "sql/advlock--0.2.0--0.3.0.sql"

# Functions new in 0.3.0 (C functions pgrx generates): their CREATE FUNCTION blocks, verbatim.
NEW = ("advlock_try_all_with_timeout", "advlock_lock_all_with_timeout", "advlock_unlock_all",
       "advlock_try_with_token", "advlock_holding", "advlock_tokens", "advlock_metrics")
# Functions 0.2.0 had in another language (plpgsql), now C: replaced in place, which keeps their
# privileges, comments and dependants.
REPLACED = ("advlock_leak_count",)
blocks = re.findall(r"/\* <begin connected objects> \*/\n(.*?)/\* </end connected objects> \*/", schema, re.S)
functions = [b for b in blocks if re.search(r'^CREATE  FUNCTION "(%s)"' % "|".join(NEW + REPLACED), b, re.M)]
functions = [re.sub(r'^CREATE  FUNCTION "(%s)"' % "|".join(REPLACED), r'CREATE OR REPLACE FUNCTION "\1"', b, flags=re.M)
             for b in functions]
functions.sort(key=lambda b: (re.search(r'FUNCTION "(\w+)"', b).group(1), b))
# Drop pgrx's source-location line (src/x.rs:NN): it changes with every edit.
functions = ["".join(line for line in b.splitlines(True) if not re.match(r"-- src/", line)) for b in functions]
sequence = re.search(r"(-- The fencing-token counter.*?SELECT pg_catalog.pg_extension_config_dump[^\n]*\n)", schema, re.S).group(1)

text = script.read_text()
begin, end = "-- <generated: new objects>\n", "-- </generated: new objects>\n"
metrics_view = (repo / "sql/metrics.sql").read_text()
# Row estimates set in sql/holders.sql before the view (ALTER FUNCTION … ROWS), verbatim.
row_estimates = "".join(re.findall(r"^ALTER FUNCTION @extschema@\.\w+\(\) ROWS \d+;\n", (repo / "sql/holders.sql").read_text(), re.M))
generated = begin + sequence + "\n" + "\n".join(functions) + "\n" + metrics_view + "\n" + row_estimates + end
if begin in text:
    text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: generated, text, flags=re.S)
else:
    marker = "-- advlock_holders: rows"
    text = text.replace(marker, generated + "\n" + marker, 1)

holders = (repo / "sql/holders.sql").read_text()
view = re.search(r"CREATE VIEW @extschema@.advlock_holders AS\n(.*?\n\) i;\n)", holders, re.S).group(1)
text = re.sub(r"(CREATE OR REPLACE VIEW @extschema@.advlock_holders AS\n).*?\n\) i;\n",
              lambda m: m.group(1) + view, text, count=1, flags=re.S)
text = re.sub(r"CREATE OR REPLACE FUNCTION @extschema@\.advlock_leak_count\(.*?\n\$fn\$;\n\n?", "", text, count=1, flags=re.S)
for fn in ("advlock_idle_holders", "advlock_terminate_idle_holders"):
    body = re.search(r"CREATE FUNCTION (@extschema@\.%s\(.*?\n\$fn\$;\n)" % fn, holders, re.S).group(1)
    text = re.sub(r"CREATE OR REPLACE FUNCTION @extschema@\.%s\(.*?\n\$fn\$;\n" % fn,
                  lambda _: "CREATE OR REPLACE FUNCTION " + body, text, count=1, flags=re.S)
comments = (repo / "sql/comments.sql").read_text()
head, sep, _ = text.partition("-- One-line descriptions for \\df+")
text = head + comments
script.write_text(text)
print(f"{script.relative_to(repo)}: {len(functions)} new functions, view, 3 functions, comments")
