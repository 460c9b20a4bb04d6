"""The price versions `sync_prices` proposed, until an operator accepts or rejects each
(docs/commands.md#sync_prices).

They wait in one JSON file (SWITCHBOARD_PRICE_PROPOSALS_FILE, written atomically); each run
of `sync_prices` replaces them with its fresh comparison. Accepting one appends its dated
version to the model's `prices` through the one write path (routing.config.store: the one
validation, one config-history revision, a reload of every serving process); the model's
existing prices and versions are never changed. Rejecting one drops it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import orjson
from django.conf import settings

from routing.config import recorder
from routing.config.document import document_from_db
from routing.config.price_catalogue import Proposal
from routing.config.store import import_document

SOURCE = "sync_prices"


class NoProposal(LookupError):
    """No proposal is waiting for that model."""


def _path() -> Path:
    return Path(settings.SWITCHBOARD_PRICE_PROPOSALS_FILE)


def pending() -> list[Proposal]:
    """The proposals waiting, in model order."""
    try:
        raw = orjson.loads(_path().read_bytes())
    except FileNotFoundError:
        return []
    return [Proposal(**p) for p in raw]


def save(proposals: list[Proposal]) -> None:
    """Replace the waiting proposals (a new run's comparison supersedes the last)."""
    path = _path()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = orjson.dumps(
        [
            {
                "model": p.model,
                "upstream_model": p.upstream_model,
                "effective_from": p.effective_from,
                "prices": p.prices,
                "current": p.current,
            }
            for p in sorted(proposals, key=lambda p: p.model)
        ],
        option=orjson.OPT_INDENT_2,
    )
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".price-proposals.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _take(model: str) -> tuple[Proposal, list[Proposal]]:
    waiting = pending()
    for p in waiting:
        if p.model == model:
            return p, [q for q in waiting if q is not p]
    raise NoProposal(f"no price proposal waits for model {model!r}: run manage.py sync_prices first")


def accept(model: str, author: str | None = None) -> Proposal:
    """Append the proposal's dated version to `model`'s prices (validated, recorded, reloaded everywhere)."""
    proposal, rest = _take(model)
    item = _model_item(model)
    versions = [e for e in item.get("prices") or () if str(e.get("effective_from")) != proposal.effective_from]
    if len(versions) != len(item.get("prices") or ()):
        raise NoProposal(f"model {model!r} has its own price version on {proposal.effective_from}: not overwritten")
    item["prices"] = [*versions, proposal.entry()]
    note = f"price version {proposal.effective_from} of {model} from the catalogue: {'; '.join(proposal.changes())}"
    with recorder.change(author=author, source=SOURCE, note=note[:500]):
        import_document({"models": [item]})
    save(rest)
    return proposal


def reject(model: str) -> Proposal:
    proposal, rest = _take(model)
    save(rest)
    return proposal


def _model_item(model: str) -> dict[str, Any]:
    for item in document_from_db().get("models") or ():
        if item["id"] == model:
            return item
    raise NoProposal(f"model {model!r} is no longer configured: reject its proposal")
