"""`affinity` of a model (docs/deployments.md#affinity): validated by the one validation, stored, exported,
and carried by the snapshot."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from routing.config.snapshot import build_snapshot
from routing.config.store import dump_yaml, export_document, import_document, load_yaml
from routing.config.validation import validate_document


def _with_deployments(doc: dict[str, Any], affinity: Any) -> dict[str, Any]:
    model = doc["models"][0]
    provider, upstream = model.pop("provider"), model.pop("upstream_model")
    second = {**doc["providers"][0], "name": "second"}
    doc["providers"].append(second)
    model["deployments"] = [
        {"provider": provider, "upstream_model": upstream},
        {"provider": "second", "upstream_model": upstream},
    ]
    model["affinity"] = affinity
    return doc


def _messages(doc: dict[str, Any]) -> list[str]:
    return [f"{e.path}: {e.message}" for e in validate_document(doc)]


def test_a_valid_affinity_passes_and_the_snapshot_carries_it(valid_doc) -> None:
    off = _with_deployments(copy.deepcopy(valid_doc), None)
    doc = _with_deployments(valid_doc, {"ttl_s": 300})
    assert _messages(doc) == []
    snap = build_snapshot(doc, [], {})
    assert snap.affine and snap.models[doc["models"][0]["id"]].affinity_s == 300.0
    assert not build_snapshot(off, [], {}).affine


@pytest.mark.parametrize(
    ("affinity", "expected"),
    [
        ({"ttl_s": 0}, "affinity ttl_s of model"),
        ({"ttl_s": "5m"}, "must be a number of seconds"),
        ({"ttl_s": 90_000}, "at most 86400"),
        ({"ttl": 300}, "unknown affinity setting 'ttl'"),
        (300, "must be a mapping such as {ttl_s: 300}"),
    ],
)
def test_a_bad_affinity_is_refused_with_what_to_do(valid_doc, affinity, expected) -> None:
    messages = _messages(_with_deployments(valid_doc, affinity))
    assert any(expected in m and ".affinity" in m for m in messages), messages


def test_affinity_on_a_one_deployment_model_is_refused(valid_doc) -> None:
    valid_doc["models"][0]["affinity"] = {"ttl_s": 300}
    messages = _messages(valid_doc)
    assert any("fewer than two deployments" in m for m in messages), messages


@pytest.mark.django_db
def test_affinity_round_trips_through_the_database(valid_doc) -> None:
    import_document(_with_deployments(valid_doc, {"ttl_s": 120}))
    doc = export_document()
    assert doc["models"][0]["affinity"] == {"ttl_s": 120}
    assert not import_document(load_yaml(dump_yaml(doc))).changed
