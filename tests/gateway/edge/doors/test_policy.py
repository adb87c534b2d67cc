"""The field policy's pieces: a table, the marks on a record, the README rendering."""

from __future__ import annotations

import pytest

from gateway.edge.doors.policy import Action, Rule, mark_dropped, markdown, table
from gateway.ledger.record import Record


def test_a_field_twice_in_a_table_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        table(Rule("a", Action.INERT), Rule("a", Action.DROP))


def test_marks_are_kept_once_in_order() -> None:
    record = Record(request_id="r", door="responses", model="m", stream=True)
    mark_dropped(record, "tools[type=web_search]")
    mark_dropped(record, "include", "tools[type=web_search]")
    assert record.dropped == "tools[type=web_search],include"


def test_markdown_has_a_row_per_field() -> None:
    policy = table(Rule("model", Action.HONOUR, "the route"), Rule("store", Action.INERT))
    lines = markdown(policy).splitlines()
    assert lines[2:] == ["| `model` | honour | the route |", "| `store` | inert |  |"]
