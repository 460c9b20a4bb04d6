"""The translated streaming paths of the TTFB benchmark (bench/responses_stream_bench.py,
docs/performance.md#responses-ttfb): each runs end to end and gives a figure, and a path that
answers an error or the wrong events stops the run before anything is timed."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from bench import responses_stream_bench as bench

NEW_KINDS = [
    "messages-translated",
    "messages-relayed",
    "chat-anthropic-structured",
    "chat-anthropic-reasoning",
    "responses-anthropic",
]


def test_the_new_kinds_run_end_to_end_and_each_gives_a_figure(tmp_path: Path) -> None:
    """`python -m bench.responses_stream_bench --kinds ...` as a user runs it, tiny: every kind's streams
    pass the check at start, every request answers 200 (else the run exits non-zero), and each kind
    has its added TTFB, its CPU per stream and its verdict entry against chat."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["SWITCHBOARD_BENCH_RUN_DIR"] = str(tmp_path)
    out_file = tmp_path / "responses-stream.json"
    argv = ["--rounds", "1", "--batch", "2", "--cpu-requests", "2", "--out", str(out_file)]
    out = subprocess.run(
        [sys.executable, "-m", "bench.responses_stream_bench", *argv, "--kinds", ",".join(NEW_KINDS)],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(out_file.read_text())
    measured = ["chat", *NEW_KINDS]  # chat, every verdict's reference, runs whatever --kinds says
    assert result["meta"]["kinds"] == measured
    assert list(result["pooled"]) == measured
    assert all(result["pooled"][kind]["n"] == 4 for kind in measured)  # 2 a batch, 2 batches a round
    assert all(isinstance(result["median_added_p50_ms"][kind], float) for kind in measured)
    # CPU is read from /proc in 10 ms clock ticks: over 2 streams a phase a kind may read 0, a real figure
    cpu = result["gateway_cpu_ms_per_request"]
    assert set(cpu) == set(measured) and all(isinstance(cpu[kind], (int, float)) and cpu[kind] >= 0 for kind in cpu)
    assert set(result["figures"]) == {f"{kind}_p50" for kind in NEW_KINDS}
    assert "responses" not in result["pooled"]  # the subset only
    assert (tmp_path / "responses_stream.json").exists()


def _stream(*events: object) -> bytes:
    return b"".join(b"data: " + (e if isinstance(e, bytes) else orjson.dumps(e)) + b"\n\n" for e in events)


def _messages_events(deltas: int) -> bytes:
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}
    return _stream({"type": "message_start"}, *([delta] * deltas), {"type": "message_stop"})


def test_a_path_answering_an_error_or_the_wrong_events_stops_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    target = [{"name": "gateway messages relayed", "url": "http://gw/v1/messages", "body": "{}"}]
    answers = iter([(200, _messages_events(bench.FRAMES)), (500, b"boom"), (200, _messages_events(3))])
    monkeypatch.setattr(bench.procs, "http", lambda *args, **kwargs: next(answers))
    bench.check_streams(target)  # the right stream passes
    with pytest.raises(RuntimeError, match="gateway messages relayed answered 500"):
        bench.check_streams(target)
    with pytest.raises(RuntimeError, match=r"text frames\) \('message_start', 'message_stop', 3\)"):
        bench.check_streams(target)


def test_a_chat_stream_without_its_terminator_or_a_structured_answer_that_is_not_json_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def chunk(text: str) -> dict[str, object]:
        return {"choices": [{"index": 0, "delta": {"content": text}}]}

    structured = [{"name": "gateway chat anthropic structured", "url": "http://gw/v1/chat/completions", "body": "{}"}]
    reasoning = [{"name": "gateway chat anthropic reasoning", "url": "http://gw/v1/chat/completions", "body": "{}"}]
    answers = iter(
        [
            (200, _stream(chunk('{"a": '), chunk("1}"), b"[DONE]")),
            (200, _stream(chunk("{x"), chunk("y"), b"[DONE]")),
            (200, _stream(*[chunk("tok ")] * bench.FRAMES)),
        ]
    )
    monkeypatch.setattr(bench.procs, "http", lambda *args, **kwargs: next(answers))
    bench.check_streams(structured)
    with pytest.raises(RuntimeError, match="did not stream chat events"):
        bench.check_streams(structured)
    with pytest.raises(RuntimeError, match="no \\[DONE\\]"):
        bench.check_streams(reasoning)


def test_kinds_keeps_chat_and_the_table_order_and_refuses_an_unknown_kind() -> None:
    assert bench.kinds_of("responses-anthropic,messages-relayed") == ["chat", "messages-relayed", "responses-anthropic"]
    with pytest.raises(argparse.ArgumentTypeError, match="unknown kinds nope"):
        bench.kinds_of("chat,nope")
    names = {t["name"] for t in bench.targets("http://mock", "http://gw", "k", ["chat", "messages-relayed"])}
    assert names == {"direct chat", "gateway chat", "direct messages", "gateway messages relayed"}
