"""Every cell of the translation conformance matrix (tests/conformance/matrix.py), walked through the
gateway in process against the repo's mock upstream: the observed outcome is the cell's, no cell is
silently dropped, and docs/translation.md shows the table as the data holds it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance import render
from tests.conformance.matrix import COLUMNS, MATRIX, SILENT, cells
from tests.conformance.observe import observe
from tests.conformance.walk import CLIENTS, FEATURES, LINKS

CELLS = cells()


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize(("client", "link", "feature", "expected"), CELLS, ids=["|".join(c[:3]) for c in CELLS])
async def test_cell(mock: Any, client: str, link: str, feature: str, expected: str) -> None:
    assert await observe(mock, client, link, feature) == expected


def test_the_matrix_covers_every_client_link_and_feature() -> None:
    assert tuple(MATRIX) == CLIENTS
    assert COLUMNS == tuple(LINKS)
    for features in MATRIX.values():
        assert tuple(features) == tuple(FEATURES)


def test_no_cell_is_silently_dropped() -> None:
    silent = [f"{client} on {link}: {feature}" for client, link, feature, expected in CELLS if expected == SILENT]
    assert not silent, silent


def test_the_docs_show_the_matrix_as_the_data_holds_it() -> None:
    assert render.current_section() == render.section(), "run: python -m tests.conformance.render"
