"""advlock.key() is spec v1: equal to the vectors file and to the server, for every vector."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import advlock
from conftest import connect

VECTORS = Path(__file__).resolve().parents[3] / "pg_test" / "vectors" / "advlock_key_v1.json"


def vectors() -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(VECTORS.read_text(encoding="utf-8"))["vectors"]
    assert len(data) >= 20
    return data


def test_s01_every_vector_without_a_server() -> None:
    for v in vectors():
        assert advlock.key(v["ns"], v["id_int"] if "id_int" in v else v["id"]) == v["key"], v


def test_s01_every_vector_equals_the_server() -> None:
    with connect() as conn:
        for v in vectors():
            if "id_int" in v:
                row = conn.execute("SELECT advlock_key(%s::text, %s::int8)", (v["ns"], v["id_int"])).fetchone()
            else:
                row = conn.execute("SELECT advlock_key(%s::text, %s::text)", (v["ns"], v["id"])).fetchone()
            assert row is not None
            assert row[0] == advlock.key(v["ns"], v["id_int"] if "id_int" in v else v["id"]) == v["key"], v


def test_s01_int_ids_hash_as_decimal_text() -> None:
    assert advlock.key("account", 42) == advlock.key("account", "42")
    assert advlock.key("account", -7) == advlock.key("account", "-7")
    assert advlock.key("migrate") == advlock.key("migrate", "")


@pytest.mark.parametrize(
    ("ns", "id", "error", "names"),
    [
        ("", "x", ValueError, "ns"),
        (None, "x", TypeError, "ns"),
        (b"account", "x", TypeError, "ns"),
        ("account", True, TypeError, "id"),
        ("account", None, TypeError, "id"),
        ("account", 4.2, TypeError, "id"),
        ("account", 2**63, ValueError, "id"),
        ("account", "a\x00b", ValueError, "id"),
    ],
)
def test_s02_bad_arguments_name_the_argument(ns: Any, id: Any, error: type[Exception], names: str) -> None:
    with pytest.raises(error, match=rf"^{names}\b"):
        advlock.key(ns, id)
