"""A report section (title, table, notes) and its two renderings, Markdown and HTML: the report
is built once as sections and rendered twice, so the two cannot disagree."""

from __future__ import annotations

import html
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Section:
    title: str
    headers: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()
    notes: tuple[str, ...] = ()


def markdown_section(s: Section) -> list[str]:
    out = [f"## {s.title}", ""]
    if s.headers:
        out.append("| " + " | ".join(s.headers) + " |")
        out.append("|" + "|".join("---" for _ in s.headers) + "|")
        out += ["| " + " | ".join(md_cell(c) for c in r) + " |" for r in s.rows]
        out.append("")
    out += [*(f"- {n}" for n in s.notes), ""] if s.notes else []
    return out


def md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def html_section(s: Section) -> list[str]:
    out = [f"<h2>{html.escape(s.title)}</h2>"]
    if s.headers:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in s.headers)
        rows = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in s.rows
        )
        out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
    if s.notes:
        out.append("<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in s.notes) + "</ul>")
    return out


HTML_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Plumbline eval report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; margin-bottom: 1em; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
</style></head><body>
{body}
</body></html>
"""
