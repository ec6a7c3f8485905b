"""The lock-timeout DETAIL is read as data: the client's parser (LockTimeout.holders) against
the wording catalogued in sql/messages.toml ([[description]] id = "holders"), which the
`messages` lint ties to the server's Rust and SQL. A DETAIL is rendered from the catalog's texts
with values quoted by the server's own quote_literal (as the server writes them: '' for a quote,
an E'' string for a backslash, nothing for NULL), and parsed back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from advlock import Holder, LockTimeout

# tomllib came in Python 3.11 (the package supports 3.10, where this test skips).
tomllib = pytest.importorskip("tomllib", reason="reading sql/messages.toml needs Python 3.11's tomllib")
CATALOG = Path(__file__).resolve().parents[3] / "sql" / "messages.toml"
# kind.holder_list: "the holders' descriptions, joined by ', '".
JOIN = ", "

SAMPLES = [
    Holder(365, "worker", "idle"),
    Holder(4242, "it's a C:\\path\\", "idle in transaction"),
    Holder(7, "batch", None),
]


def holder_texts() -> tuple[str, str]:
    """The catalog's list text (with {holder_list}) and one-holder text (with {pid})."""
    catalog = tomllib.loads(CATALOG.read_text(encoding="utf-8"))
    found = [d for d in catalog.get("description", []) if d.get("id") == "holders"]
    assert found, f"{CATALOG} has no [[description]] with id = 'holders'"
    texts: list[str] = found[0]["texts"]
    held_by = [t for t in texts if "{holder_list}" in t]
    one = [t for t in texts if "{pid}" in t]
    assert len(held_by) == 1 and len(one) == 1, f"the holders texts of sql/messages.toml are now {texts}"
    return held_by[0], one[0]


def literal(admin: psycopg.Connection[Any], value: str | None) -> str:
    """`value` as the server's format('%s', quote_literal(value)) writes it."""
    row = admin.execute("SELECT format('%%s', quote_literal(%s::text))", (value,)).fetchone()
    assert row is not None
    return str(row[0])


def test_s06_the_holders_parser_reads_the_catalogued_detail(admin: psycopg.Connection[Any]) -> None:
    held_by, one_holder = holder_texts()
    try:
        rendered = [
            one_holder.format(
                pid=h.pid, application_name=literal(admin, h.application_name), state=literal(admin, h.state)
            )
            for h in SAMPLES
        ]
        details = [held_by.format(holder_list=r) for r in rendered]
    except (KeyError, IndexError) as e:
        raise AssertionError(
            f"the catalog's holders texts {held_by!r} / {one_holder!r} (sql/messages.toml) have a placeholder "
            f"the client does not parse: {e}"
        ) from e
    assert "E'" in rendered[1] and "''" in rendered[1]  # the sample exercises both quotings
    assert literal(admin, None) == ""  # and a NULL state, written as nothing
    details.append(held_by.format(holder_list=JOIN.join(rendered)))
    expected = [(h,) for h in SAMPLES] + [tuple(SAMPLES)]
    for detail, holders in zip(details, expected, strict=True):
        parsed = LockTimeout("could not obtain the lock", detail).holders
        assert parsed == holders, (
            f"the client read {parsed} from the DETAIL {detail!r}, rendered from the catalog's texts "
            f"{held_by!r} and {one_holder!r} (sql/messages.toml, [[description]] id = 'holders'): "
            "advlock/_errors.py parse_holders must follow the wording"
        )
