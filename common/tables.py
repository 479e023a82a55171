"""Markdown tables, for the reports of 05_evaluate.py and the benchmark scripts' results."""

from __future__ import annotations


def markdown_table(header: list[str], body: list[list[str]], align: str | None = None) -> str:
    """A GitHub Markdown table; `align` is one character per column, 'l' or 'r' (default:
    the first column left, the others right). A '|' inside a cell is escaped."""
    align = align or "l" + "r" * (len(header) - 1)
    rule = ["---" if a == "l" else "---:" for a in align]
    lines = [header, rule, *body]
    return "".join("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |\n" for row in lines)
