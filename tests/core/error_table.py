"""The documented error table (docs/errors.md#the-table), read as data for the tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "errors.md"
HEADER = "| code | status | type | meaning |"


@dataclass(frozen=True)
class Row:
    code: str
    status: int | None  # None: the upstream's 4xx
    type: str
    meaning: str

    def allows(self, status: int) -> bool:
        return 400 <= status < 500 if self.status is None else status == self.status


def _cell(text: str) -> str:
    return text.strip().strip("`")


def rows() -> dict[str, Row]:
    """code -> Row, from the first table of docs/errors.md with the columns code|status|type|meaning."""
    lines = DOC.read_text().splitlines()
    start = lines.index(HEADER) + 2  # skip the |---| line
    table: dict[str, Row] = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        code, status, type_, meaning = (c for c in line.strip().strip("|").split("|"))
        status = _cell(status)
        table[_cell(code)] = Row(_cell(code), int(status) if status.isdigit() else None, _cell(type_), meaning.strip())
    return table
