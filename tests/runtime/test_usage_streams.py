"""Streams journaled at their commit and replayed after a crash (docs/usage-records.md#streams), on the
real sink, spool directory and database; the dead process is a sink with the pid of an exited process."""

from __future__ import annotations

import uuid

import pytest

from routing.models import UsageRecord
from routing.runtime.usage import UsageSink
from routing.runtime.usage.streams import StreamJournal, interrupted_rows
from tests.runtime.test_usage import dead_pid, rec


def committed(n: int, record_id: str) -> dict:
    """A stream's record as journaled at its commit: the prompt estimate, nothing relayed yet."""
    return rec(n, record_id=record_id, streamed=True, completion_tokens=0, error_code="interrupted", cost=0.00001)


def frame(i: int) -> bytes:
    return b'data: {"choices":[{"delta":{"content":"tok%d "}}]}\n\n' % i


@pytest.mark.django_db
def test_a_dead_process_s_open_streams_are_written_once_as_interrupted_with_the_frames_relayed(tmp_path):
    old = UsageSink(spool_dir=tmp_path, pid=dead_pid())
    ids = [uuid.uuid4().hex for _ in range(3)]
    cut = old.streams.open(committed(0, ids[0]), (1.0, 1000.0))
    done = old.streams.open(committed(1, ids[1]), (1.0, 1000.0))
    old.streams.open(committed(2, ids[2]), (1.0, 1000.0))  # ends, but the process dies before its close
    for i in range(5):
        cut.relayed(frame(i))
    done.relayed(frame(0) + frame(1))
    old.record(rec(1, record_id=ids[1], streamed=True, completion_tokens=2))  # settled, then closed
    old.streams.close(done)
    # killed between its settled record and its close line: both are on disk
    old.record(rec(2, record_id=ids[2], streamed=True, completion_tokens=7))

    new = UsageSink(spool_dir=tmp_path)
    new.adopt_orphans()
    assert new.flush_now()
    rows = {r.request_id: r for r in UsageRecord.objects.all()}
    assert sorted(rows) == ["req-0", "req-1", "req-2"]  # one each
    assert (rows["req-0"].error_code, rows["req-0"].completion_tokens, rows["req-0"].status) == ("interrupted", 5, 200)
    assert float(rows["req-0"].cost) == pytest.approx((10 * 1.0 + 5 * 1000.0) / 1e6)
    assert (rows["req-1"].error_code, rows["req-1"].completion_tokens) == ("", 2)
    assert (rows["req-2"].error_code, rows["req-2"].completion_tokens) == ("", 7), "the settled record must win"
    assert list(tmp_path.glob("streams-*")) == []  # replayed once: their files are gone
    new.adopt_orphans()
    assert new.flush_now() and UsageRecord.objects.count() == 3


def test_a_rewritten_streams_file_keeps_the_open_streams_and_reuses_slots_from_zero(tmp_path, monkeypatch):
    from routing.runtime.usage import streams

    monkeypatch.setattr(streams, "ROTATE_BYTES", 1)  # every open rewrites the file
    journal = StreamJournal(lambda: tmp_path, 4242)
    first = journal.open(committed(0, "a" * 32), (1.0, 1.0))
    first.relayed(frame(0) * 3)
    journal.close(first)
    second = journal.open(committed(1, "b" * 32), (1.0, 1.0))
    assert second.slot == first.slot  # reused, and counted from zero again
    third = journal.open(committed(2, "c" * 32), (1.0, 1.0))
    third.relayed(frame(0))
    files = sorted(tmp_path.glob("streams-*"))
    assert len([p for p in files if p.suffix == ".jsonl"]) == 1
    rows = {r["record_id"]: r for r in interrupted_rows(files)}
    assert sorted(rows) == ["b" * 32, "c" * 32]
    assert rows["b" * 32]["completion_tokens"] == 0 and rows["c" * 32]["completion_tokens"] == 1


def test_a_clean_shutdown_removes_the_streams_files_unless_a_stream_is_still_open(tmp_path):
    sink = UsageSink(spool_dir=tmp_path, insert=lambda rows: None)
    first = sink.streams.open(committed(0, "d" * 32), (1.0, 1.0))
    sink.streams.close(first)
    sink.shutdown(timeout_s=1)
    assert list(tmp_path.glob("streams-*")) == []

    other = UsageSink(spool_dir=tmp_path, insert=lambda rows: None)
    other.streams.open(committed(1, "e" * 32), (1.0, 1.0))
    other.shutdown(timeout_s=1)
    assert len(list(tmp_path.glob("streams-*"))) == 2  # its record is written by the next process
