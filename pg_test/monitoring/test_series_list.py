"""monitoring/README.md lists every series monitoring/postgres_exporter/queries.yaml makes the
exporter print ("<query>_<column>" for each column that is not a LABEL), with its type: the
table under "## Metrics" and the file must name the same series, none missing, none extra.
(That the exporter prints exactly these names is test_exporter.py's business, on a real
/metrics.)"""
import re

from monsupport import MONITORING, QUERIES, exported_series

README = MONITORING / "README.md"


def readme_series() -> dict:
    """{name: type} of the rows of the table in README.md's "## Metrics" section."""
    text = README.read_text()
    section = text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_:][a-z0-9_:]*)` \| ([a-z]+) \|", section, re.M)
    names = [n for n, _ in rows]
    assert len(names) == len(set(names)), f"a series listed twice: {sorted(n for n in names if names.count(n) > 1)}"
    return dict(rows)


def test_readme_lists_every_series_of_queries_yaml():
    emitted = exported_series()
    listed = readme_series()
    assert len(emitted) >= 30, f"queries.yaml read wrongly? {emitted}"
    missing = sorted(set(emitted) - set(listed))
    extra = sorted(set(listed) - set(emitted))
    assert not missing, f"series of {QUERIES.name} not listed in monitoring/README.md: {missing}"
    assert not extra, f"monitoring/README.md lists series {QUERIES.name} does not emit: {extra}"
    wrong = {n: (listed[n], t) for n, t in emitted.items() if listed[n] != t}
    assert not wrong, f"types in README.md vs queries.yaml (usage): {wrong}"


def test_the_reader_sees_every_query():
    """exported_series() reads this file's layout by hand: every top-level query of the file,
    and every column under its metrics:, must be accounted for (a layout it misreads fails)."""
    text = QUERIES.read_text()
    queries = re.findall(r"^([a-z_][a-z0-9_]*):\s*$", text, re.M)
    columns = re.findall(r"^\s+- ([a-z_][a-z0-9_]*):\s*$", text, re.M)
    usages = re.findall(r'^\s+usage:\s*"([A-Z]+)"\s*$', text, re.M)
    assert len(columns) == len(usages), (len(columns), len(usages))
    series = exported_series()
    assert {n.split("_", 1)[0] for n in series} == {"advlock"}
    for q in queries:
        assert any(n.startswith(q + "_") for n in series), f"query {q}: no series read"
    assert len(series) == sum(u != "LABEL" for u in usages), (len(series), usages)
