"""The Responses event grammar, as OpenAI's streaming reference and the official SDK's types have it
(docs/api.md#responses): one checker for every stream the gateway sends on `/v1/responses`.

- `sequence_number` counts 0, 1, 2, ... (strictly increasing from 0; contiguous when the gateway
  numbered the events itself, i.e. translated from another protocol);
- `response.created` first, `response.completed` last (`response.incomplete` for a cut answer);
- every item is added once (`response.output_item.added`) before any event naming it, every event
  with an `item_id` names an added item at its `output_index`, and each added item is done once;
- an item's deltas add up to its `*.done` text or arguments, which are the done item's own (a
  reasoning item's: per summary part, `response.reasoning_summary_text.delta`s add up to its
  `.done` text, which is that part's text in the done item, and a part is added before its text);
- every done item is in `response.completed`'s output, equal, in order (done ⊆ completed).
"""

from __future__ import annotations

from typing import Any

import orjson

ENDS = ("response.completed", "response.incomplete")


def parse_sse(raw: bytes) -> list[dict[str, Any]]:
    """The events of a Responses stream's bytes; an `event:` line must name its data's `type`."""
    events: list[dict[str, Any]] = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        name, data = None, []
        for line in block.split(b"\n"):
            if line.startswith(b"event:"):
                name = line[6:].strip().decode()
            elif line.startswith(b"data:"):
                data.append(line[5:].strip())
        if not data:
            assert name is None, f"an event without data: {block!r}"
            continue
        event = orjson.loads(b"\n".join(data))
        assert name is None or name == event["type"], (name, event["type"])
        events.append(event)
    return events


def check_grammar(events: list[dict[str, Any]], *, contiguous: bool = True) -> dict[str, Any]:
    """Assert the grammar of one response's events; its completed `response` object."""
    numbers = [e["sequence_number"] for e in events]
    if contiguous:
        assert numbers == list(range(len(events))), numbers
    else:
        assert numbers[0] == 0 and all(a < b for a, b in zip(numbers, numbers[1:], strict=False)), numbers
    kinds = [e["type"] for e in events]
    assert kinds[0] == "response.created" and kinds[-1] in ENDS, kinds
    assert kinds.count("response.created") == 1 and sum(kinds.count(k) for k in ENDS) == 1, kinds
    done = _check_items(events[1:-1])
    completed = events[-1]["response"]
    output = completed["output"]
    assert [item["id"] for item in done] == [item["id"] for item in output], (done, output)
    for item, final in zip(done, output, strict=True):
        assert item == final, (item, final)  # done ⊆ completed, the item as it was done
    return completed


def _check_items(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Item ids consistent from added to done, deltas adding up; the done items in order."""
    added: dict[int, dict[str, Any]] = {}  # output_index -> the item as added
    pieces: dict[tuple[str, str], list[str]] = {}  # (item id, kind of delta) -> the deltas
    finals: dict[tuple[str, str], str] = {}  # (item id, kind) -> the *.done text or arguments
    done: list[dict[str, Any]] = []
    for event in events:
        kind, index = event["type"], event.get("output_index")
        if kind == "response.output_item.added":
            assert index == len(added) and event["item"]["id"] not in {i["id"] for i in added.values()}, event
            added[index] = event["item"]
            continue
        if kind == "response.output_item.done":
            item = event["item"]
            assert index in added and added[index]["id"] == item["id"], (added, event)
            assert added[index]["type"] == item["type"] and item["id"] not in {i["id"] for i in done}, event
            done.append(item)
            _check_item_text(item, pieces, finals)
            continue
        if "item_id" in event:
            assert index in added and added[index]["id"] == event["item_id"], (added, event)
            assert event["item_id"] not in {i["id"] for i in done}, f"an event after its item's done: {event}"
            _collect(event, pieces, finals)
    assert len(done) == len(added), f"items added and never done: {added}"
    return done


def _collect(event: dict[str, Any], pieces: dict, finals: dict) -> None:
    kind = event["type"]
    what = kind.rsplit(".", 1)[0]  # response.output_text, response.function_call_arguments, ...
    if kind.startswith("response.reasoning_summary_"):
        _collect_summary(event, pieces, finals)
        return
    key = (event["item_id"], what)
    if kind.endswith(".delta"):
        assert key not in finals, f"a delta after its done: {event}"
        pieces.setdefault(key, []).append(event["delta"])
    elif kind in ("response.output_text.done", "response.function_call_arguments.done"):
        value = event["text"] if kind == "response.output_text.done" else event["arguments"]
        assert "".join(pieces.get(key, [])) == value, (pieces.get(key), event)
        finals[key] = value


def _collect_summary(event: dict[str, Any], pieces: dict, finals: dict) -> None:
    """A reasoning item's summary events, keyed by their part (`summary_index`)."""
    kind, index = event["type"], event["summary_index"]
    key = (event["item_id"], f"summary[{index}]")
    part = (event["item_id"], f"summary part[{index}]")
    if kind == "response.reasoning_summary_part.added":
        assert part not in finals and event["part"]["type"] == "summary_text", event
        finals[part] = None
        return
    assert part in finals, f"a summary event before its part was added: {event}"
    if kind == "response.reasoning_summary_text.delta":
        assert key not in finals, f"a delta after its done: {event}"
        pieces.setdefault(key, []).append(event["delta"])
    elif kind == "response.reasoning_summary_text.done":
        assert "".join(pieces.get(key, [])) == event["text"], (pieces.get(key), event)
        finals[key] = event["text"]
    elif kind == "response.reasoning_summary_part.done":
        assert finals.get(key, "") == event["part"]["text"], (finals.get(key), event)


def _check_item_text(item: dict[str, Any], pieces: dict, finals: dict) -> None:
    """A done item's text or arguments are what its deltas and its *.done event said."""
    if item["type"] == "message":
        text = "".join(p.get("text", "") for p in item["content"] if p.get("type") == "output_text")
        assert finals.get((item["id"], "response.output_text"), "") == text, (item, finals)
    elif item["type"] == "function_call":
        assert finals.get((item["id"], "response.function_call_arguments")) == item["arguments"], (item, finals)
    elif item["type"] == "reasoning":
        for i, part in enumerate(item["summary"]):
            assert part["type"] == "summary_text", item
            assert finals.get((item["id"], f"summary[{i}]"), "") == part["text"], (item, finals)
