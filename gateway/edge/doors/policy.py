"""Field policy: what a front door does with each field a client may send.

Every field a door knows gets one of four actions, written down in the door's table (one table
per door, in its protocol module, rendered into the README):

- ``honour``: served as the API means it;
- ``translate``: mapped to the chat-completions request and back;
- ``inert``: accepted and without effect (labels, hints, cache controls);
- ``drop``: removed before the upstream because the gateway cannot serve it (a hosted tool, say),
  and *marked*: named in the ``x-plumbline-dropped`` answer header, on the request's record
  (``dropped``) and in ``gateway_dropped_fields_total``.

A field a door does not know is inert: harnesses add fields with every release, and a 400 on
one breaks them (Codex does not retry a 400). A door refuses (400) only where serving the
request would silently change its meaning.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gateway.serving.dropped import HEADER, mark_dropped

__all__ = ["HEADER", "Action", "Rule", "mark_dropped", "markdown", "table"]


class Action(StrEnum):
    HONOUR = "honour"
    TRANSLATE = "translate"
    INERT = "inert"
    DROP = "drop"


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of a door's table: a field (a dotted path, or ``tools[type=web_search]``), what
    the door does with it, and why, in a few words (the README shows them)."""

    field: str
    action: Action
    note: str = ""


def table(*rules: Rule) -> dict[str, Rule]:
    """A door's policy, by field; a field written twice is a mistake in the table."""
    out: dict[str, Rule] = {}
    for rule in rules:
        if rule.field in out:
            raise ValueError(f"field {rule.field!r} is in the policy table twice")
        out[rule.field] = rule
    return out


def markdown(policy: dict[str, Rule]) -> str:
    """The table as README Markdown: field, action, note."""
    rows = [f"| `{r.field}` | {r.action} | {r.note} |" for r in policy.values()]
    return "\n".join(["| field | action | note |", "|---|---|---|", *rows])
