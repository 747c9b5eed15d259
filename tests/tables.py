"""The rows of the tables the operator command prints, read back for the CLI tests."""

from __future__ import annotations


def table_rows(text: str) -> list[list[str]]:
    """The body rows of every table in `text` (rich's box drawing), each as its cells' text."""
    return [[cell.strip() for cell in line.split("│")[1:-1]]
            for line in text.splitlines() if line.startswith("│")]
