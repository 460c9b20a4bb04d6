"""Write the conformance matrix into docs/translation.md between its markers:
`python -m tests.conformance.render` (test_matrix.py fails while the page differs from the data)."""

from __future__ import annotations

from pathlib import Path

from tests.conformance.matrix import COLUMNS, MATRIX, NOT_COVERED

DOC = Path(__file__).resolve().parents[2] / "docs" / "translation.md"
START = "<!-- matrix:start -->"
END = "<!-- matrix:end -->"
SHORT = {"passthrough": "as sent", "translated": "translated", "n/a": "—", "silently dropped": "**silently dropped**"}


def _cell(value: str) -> str:
    if value.startswith("refused:"):
        return f"400 `{value.removeprefix('refused:')}`"
    if value.startswith("dropped-hint:"):
        return f"dropped: `{value.removeprefix('dropped-hint:')}`"
    return SHORT[value]


def section() -> str:
    """The markdown between the markers, from the data."""
    lines = [
        "| client | feature | " + " | ".join(f"`{link}`" for link in COLUMNS) + " |",
        "|---|---|" + "---|" * len(COLUMNS),
    ]
    for client, features in MATRIX.items():
        for feature, row in features.items():
            lines.append(f"| {client} | {feature} | " + " | ".join(_cell(value) for value in row) + " |")
    lines += ["", "Not in the matrix yet (covered by the per-pair tests): " + "; ".join(NOT_COVERED) + "."]
    return "\n" + "\n".join(lines) + "\n"


def current_section() -> str:
    """The markdown between the markers as the page has it now."""
    text = DOC.read_text(encoding="utf-8")
    return text.split(START, 1)[1].split(END, 1)[0]


def write() -> None:
    text = DOC.read_text(encoding="utf-8")
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    DOC.write_text(f"{head}{START}{section()}{END}{tail}", encoding="utf-8")


if __name__ == "__main__":
    write()
