"""docs/preload.md's examples, run as written (pg_test/clients/docexamples.py has the rules).

The test command runs this suite twice: plain, and with shared_preload_libraries = 'advlock'.
Preloaded, every example must run without an error or WARNING, and the label example must show
the label and scope the page shows. Without preload the page says what happens instead: the
label example runs with label and scope NULL, and advlock_stats / advlock_stats_info raise
55000 (advlock must be loaded via "shared_preload_libraries")."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "clients"))
import docexamples as dx  # noqa: E402

from monsupport import connect  # noqa: E402

LABELS = "SELECT key, mode, label, scope, held_since FROM advlock_holders WHERE pid = pg_backend_pid();"
STATS = ("SELECT * FROM advlock_stats;", "SELECT * FROM advlock_stats_info;")


def run(block):
    s = dx.Session("preload-doc", connect("advlock-test/preload-doc"))
    try:
        s.submit(block.text)
        dx.wait_idle(s, block.where())
        return s.outcomes
    finally:
        s.close()


def test_preload_doc_examples(preloaded):
    for marker in (LABELS,) + STATS:
        assert dx.block_with(marker).path.name == "preload.md"
    labels = run(dx.block_with(LABELS))
    dx.check(labels, "docs/preload.md, labels")
    row = next(o.rows for o in labels if o.statement.sql.startswith("SELECT key, mode, label"))
    assert len(row) == 1, row
    if preloaded:
        assert row[0][1:4] == ("exclusive", "billing:invoice-17", "xact"), row
    else:
        assert row[0][1:4] == ("exclusive", None, None), row
    for marker in STATS:
        block = dx.block_with(marker)
        outcomes = run(block)
        if preloaded:
            dx.check(outcomes, block.where())
        else:
            assert [o.error.sqlstate if o.error else None for o in outcomes] == ["55000"], outcomes
            assert "shared_preload_libraries" in str(outcomes[0].error)
