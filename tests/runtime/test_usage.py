"""Usage records: written in batches, kept through database outages, never doubled."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
import types

import orjson
import pytest
from django.db import OperationalError, connections

from routing.models import UsageRecord
from routing.runtime import usage
from routing.runtime.process import current
from routing.runtime.usage import UsageSink, cost, db_insert
from routing.runtime.usage.spool import read_rows


def rec(n: int, **extra) -> dict:
    base = {
        "request_id": f"req-{n}",
        "org": "acme",
        "agent": "bot",
        "key_prefix": "sk-sb-ab",
        "endpoint": "chat",
        "requested_model": "op-fast",
        "resolved_model": "op-chat",
        "model_used": "op-chat",
        "provider": "op-a",
        "attempts": 1,
        "status": 200,
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "latency_ms": 12.5,
        "streamed": False,
    }
    base.update(extra)
    return base


def dead_pid() -> int:
    """The pid of a process that has exited."""
    out = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    return int(out.stdout)


class Switch:
    """An insert function whose database can be switched off and on."""

    def __init__(self, using: str = "default") -> None:
        self.down = False
        self.calls = 0
        self.using = using

    def __call__(self, rows: list[dict]) -> None:
        self.calls += 1
        if self.down:
            raise OperationalError("connection refused (simulated)")
        db_insert(rows, using=self.using)


def test_cost_uses_prices_per_million_tokens(snapshot):
    model = snapshot.models["op-chat"]
    assert cost(model, 1_000_000, 500_000) == pytest.approx(1.0 + 1.0)
    assert cost(model, 10, 5) == pytest.approx(10 / 1e6 + 10 / 1e6)
    assert cost(model, None, None) is None
    unpriced = snapshot.models["op-chat-b"]
    assert cost(unpriced, 10, 0) is None
    assert cost(unpriced, 0, 0) == 0.0


@pytest.mark.django_db
def test_success_fallback_and_error_records_are_written(tmp_path):
    sink = UsageSink(spool_dir=tmp_path)
    sink.record(rec(1, cost=0.00002))
    sink.record(rec(2, model_used="op-chat-b", provider="op-b", fallback_reason="upstream_5xx", attempts=4))
    sink.record(
        **rec(
            3, status=503, error_code="upstream_unavailable", prompt_tokens=None, completion_tokens=None, model_used=""
        )
    )
    assert sink.backlog() == 3

    assert sink.flush_now() is True

    assert sink.backlog() == 0
    rows = {r.request_id: r for r in UsageRecord.objects.all()}
    assert set(rows) == {"req-1", "req-2", "req-3"}
    assert (
        rows["req-1"].status == 200
        and rows["req-1"].prompt_tokens == 10
        and float(rows["req-1"].cost) == pytest.approx(0.00002)
    )
    assert (
        rows["req-2"].fallback_reason == "upstream_5xx"
        and rows["req-2"].attempts == 4
        and rows["req-2"].model_used == "op-chat-b"
    )
    assert (
        rows["req-3"].status == 503
        and rows["req-3"].error_code == "upstream_unavailable"
        and rows["req-3"].prompt_tokens is None
    )
    assert rows["req-1"].created_at is not None


@pytest.mark.django_db
def test_outage_spools_past_the_memory_bound_and_recovery_writes_everything_once(tmp_path):
    db = Switch()
    sink = UsageSink(spool_dir=tmp_path, memory_bound=5, batch=3, insert=db)
    db.down = True
    for n in range(4):
        sink.record(rec(n))
    assert sink.flush_now() is False
    assert list(tmp_path.glob("spool-*.jsonl")) == []  # under the bound: memory only
    assert sink.backlog() == 4

    for n in range(4, 12):
        sink.record(rec(n))
    sink.flush_now()
    spooled = list(tmp_path.glob("spool-*.jsonl"))
    assert len(spooled) == 1 and sink.memory_count() == 0
    assert sum(1 for _ in spooled[0].read_bytes().splitlines()) == 12
    assert sink.backlog() == 12
    assert UsageRecord.objects.count() == 0

    for n in range(12, 15):  # traffic continues during the outage
        sink.record(rec(n))
    sink.flush_now()
    assert sink.backlog() == 15

    db.down = False
    assert sink.flush_now() is True
    assert sink.backlog() == 0
    assert list(tmp_path.glob("spool-*")) == []
    ids = list(UsageRecord.objects.values_list("request_id", flat=True))
    assert sorted(ids) == sorted(f"req-{n}" for n in range(15))


@pytest.mark.django_db
def test_replaying_a_spool_whose_rows_were_already_committed_does_not_double_them(tmp_path):
    sink = UsageSink(spool_dir=tmp_path)
    sink.record(rec(1))
    sink.record(rec(2))
    sink.spill()  # e.g. spooled at SIGTERM while the database write was in flight
    db_insert([rec(1)])
    sink.record(rec(3))
    assert sink.flush_now()
    assert sorted(UsageRecord.objects.values_list("request_id", flat=True)) == ["req-1", "req-2", "req-3"]


def test_the_writer_pauses_after_each_chunk_as_long_as_the_chunk_took_and_not_after_the_last():
    now = [0.0]
    pauses: list[float] = []

    def sleep(s: float) -> None:
        pauses.append(s)
        now[0] += s

    pace = usage.writer.Pace(sleep=sleep, clock=lambda: now[0])
    seen = []
    for chunk in pace.chunks(list(range(60)), size=25):
        now[0] += 0.001 * len(chunk)  # the caller's work on this chunk
        seen.extend(chunk)
    assert seen == list(range(60))
    assert pauses == pytest.approx([0.025, 0.025])  # after chunks 1 and 2; none after the last (10 rows)


@pytest.mark.django_db
def test_a_batch_of_several_chunks_is_written_whole_with_a_pause_between_chunks():
    """The Python path (SQLite's, and PostgreSQL's fallback; PostgreSQL's own is one statement)."""
    pauses: list[float] = []
    rows = [rec(n) for n in range(usage.writer.CHUNK_ROWS * 2 + 3)]
    usage.writer.db_insert_python(rows, pace=usage.writer.Pace(sleep=pauses.append))
    assert UsageRecord.objects.count() == len(rows)
    assert len(pauses) == 4  # 3 chunks converted, 3 inserted: a pause between chunks, none after the last


@pytest.mark.django_db
def test_a_writer_behind_by_a_quarter_of_the_memory_bound_writes_without_pauses(tmp_path):
    """Under a saturating load the paused writer fell behind until its records spilled to disk
    (docs/usage-records.md#batch): past a quarter of the bound it catches up unpaused."""
    pauses: list[float] = []
    # the Python insert path with the sink's pace (SQLite's path; PostgreSQL's one statement has no pauses)
    sink = UsageSink(
        spool_dir=tmp_path, memory_bound=400, insert=lambda rows: usage.writer.db_insert_python(rows, pace=sink._pace)
    )
    sink._pace._sleep = pauses.append  # the writer's pauses, counted instead of slept
    for n in range(usage.writer.CHUNK_ROWS * 3):  # 75 waiting: under a quarter of 400
        sink.record(rec(n))
    assert not sink.behind()
    assert sink.flush_now()
    assert len(pauses) == 4  # 3 chunks converted, 3 inserted: paused between chunks
    pauses.clear()
    for n in range(100, 200):  # 100 waiting: a quarter of 400
        sink.record(rec(n))
    assert sink.behind()
    assert sink.flush_now()
    assert pauses == []
    assert UsageRecord.objects.count() == 175 and not sink.behind()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_the_writer_thread_runs_below_the_event_loop_s_cpu_priority_and_leaves_the_process_s_alone():
    """docs/performance.md#writer: the kernel gives a core to the loop before the writer's batch."""
    import os
    import threading

    main = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    worker = usage.writer.DaemonWorker("test-writer")
    theirs = worker.submit(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id())).result(5)
    assert theirs == min(19, main + usage.writer.BACKGROUND_NICE)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == main
    plain = usage.writer.DaemonWorker("test-plain", nice=0)
    assert plain.submit(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id())).result(5) == main


@pytest.fixture
def unreachable_alias(tmp_path, django_db_blocker):
    """A real second database alias: SQLite in a directory that does not exist yet."""
    alias = "usage_unreachable"
    directory = tmp_path / "db-not-there"
    config = dict(connections.settings["default"])
    config.update(
        ENGINE="django.db.backends.sqlite3",
        NAME=str(directory / "usage.sqlite3"),
        OPTIONS={},
        HOST="",
        PORT="",
        USER="",
        PASSWORD="",
        TEST={"NAME": None, "CHARSET": None, "COLLATION": None, "MIGRATE": True, "MIRROR": None},
    )
    connections.settings[alias] = config
    with django_db_blocker.unblock():
        yield alias, directory
        try:
            connections[alias].close()
        except Exception:
            pass
    del connections[alias]
    del connections.settings[alias]


def test_real_unreachable_database_keeps_records_until_it_comes_back(tmp_path, unreachable_alias):
    alias, directory = unreachable_alias
    spool = tmp_path / "spool"
    sink = UsageSink(spool_dir=spool, memory_bound=2, using=alias)
    for n in range(3):
        sink.record(rec(n))
    assert sink.flush_now() is False
    assert sink.down_since is not None
    assert len(list(spool.glob("spool-*.jsonl"))) == 1
    sink.record(rec(3))
    assert sink.flush_now() is False
    assert sink.backlog() == 4

    directory.mkdir()  # the database is back (and has its table)
    with connections[alias].schema_editor() as editor:
        editor.create_model(UsageRecord)
    assert sink.flush_now() is True
    assert sink.down_since is None
    assert sorted(UsageRecord.objects.using(alias).values_list("request_id", flat=True)) == [
        f"req-{n}" for n in range(4)
    ]
    assert list(spool.iterdir()) == []


@pytest.mark.django_db
def test_spool_file_of_a_dead_process_is_adopted_and_written(tmp_path):
    pid = dead_pid()
    orphan = tmp_path / f"spool-{pid}-1-1.jsonl"
    orphan.write_bytes(b"".join(orjson.dumps(rec(n)) + b"\n" for n in range(3)) + b'{"request_id": "torn')
    alive = tmp_path / "spool-1-1-1.jsonl"  # pid 1 is alive: not ours to take
    alive.write_bytes(orjson.dumps(rec(99)) + b"\n")

    sink = UsageSink(spool_dir=tmp_path)
    assert sink.adopt_orphans() == 1
    assert sink.backlog() == 3
    assert sink.flush_now()

    assert sorted(UsageRecord.objects.values_list("request_id", flat=True)) == ["req-0", "req-1", "req-2"]
    assert not orphan.exists() and alive.exists()


@pytest.mark.django_db(transaction=True)
async def test_background_writer_adopts_orphans_and_drains(tmp_path):
    pid = dead_pid()
    (tmp_path / f"spool-{pid}-5-1.jsonl").write_bytes(orjson.dumps(rec(50)) + b"\n")
    sink = UsageSink(spool_dir=tmp_path, flush_s=0.01)
    for n in range(5):
        sink.record(rec(n))
    task = asyncio.create_task(sink.run_writer())
    try:
        for _ in range(500):
            if sink.backlog() == 0:
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
    assert sink.backlog() == 0
    ids = await asyncio.to_thread(lambda: sorted(UsageRecord.objects.values_list("request_id", flat=True)))
    assert ids == sorted([f"req-{n}" for n in range(5)] + ["req-50"])


@pytest.mark.django_db(transaction=True)
def test_shutdown_flushes_to_the_database(tmp_path):
    sink = UsageSink(spool_dir=tmp_path)
    for n in range(3):
        sink.record(rec(n))
    sink.shutdown(timeout_s=10)
    assert UsageRecord.objects.count() == 3
    assert list(tmp_path.iterdir()) == []


@pytest.mark.django_db
def test_shutdown_with_database_down_spools_and_the_next_process_writes_them(tmp_path):
    db = Switch()
    db.down = True
    old = UsageSink(spool_dir=tmp_path, insert=db, pid=dead_pid())  # the process that is stopping
    for n in range(4):
        old.record(rec(n))
    old.shutdown(timeout_s=2)
    assert old.memory_count() == 0
    assert len(list(tmp_path.glob("spool-*.jsonl"))) == 1

    new = UsageSink(spool_dir=tmp_path)
    new.adopt_orphans()
    assert new.flush_now()
    assert sorted(UsageRecord.objects.values_list("request_id", flat=True)) == [f"req-{n}" for n in range(4)]


@pytest.mark.django_db
def test_a_row_the_database_refuses_goes_to_the_rejected_file_and_does_not_block_others(tmp_path):
    sink = UsageSink(spool_dir=tmp_path)
    sink.record(rec(1))
    sink.record({"status": 200})  # no request id: cannot be stored
    sink.record(rec(2))
    assert sink.flush_now()
    assert sorted(UsageRecord.objects.values_list("request_id", flat=True)) == ["req-1", "req-2"]
    rejected = list(tmp_path.glob("rejected-*.jsonl"))
    assert len(rejected) == 1 and b'"status":200' in rejected[0].read_bytes()


@pytest.mark.django_db
def test_each_request_is_logged_once_through_an_outage_its_retries_and_a_spill(tmp_path, caplog):
    """The writer parses queued records one batch at a time and logs them when first tried: a batch
    the database refused and writes again, or one that goes to a spool file, is not logged twice."""
    logger = logging.getLogger("switchboard.requests")
    logger.addHandler(caplog.handler)
    try:
        caplog.set_level(logging.INFO, logger="switchboard.requests")
        switch = Switch()
        switch.down = True
        sink = UsageSink(spool_dir=tmp_path, insert=switch, batch=2)
        for n in range(3):
            sink.record(rec(n))
        assert not sink.drain()  # refused: its first chunk was tried, and logged
        sink.record(rec(3))
        assert not sink.drain()  # tried again: logged no more
        sink.record(rec(4))
        assert sink.spill() == 5  # the records never tried are logged as they go to the file
        sink.record(rec(5))
        switch.down = False
        assert sink.drain()
    finally:
        logger.removeHandler(caplog.handler)
    logged = [orjson.loads(r.getMessage().split("\n")[i])["request_id"] for r in caplog.records
              if r.name == "switchboard.requests" for i in range(r.getMessage().count("\n") + 1)]  # fmt: skip
    assert sorted(logged) == [f"req-{n}" for n in range(6)]
    assert sorted(UsageRecord.objects.values_list("request_id", flat=True)) == [f"req-{n}" for n in range(6)]


def test_a_torn_line_is_skipped_with_a_warning_in_a_file_and_in_a_batch_of_queued_lines(tmp_path, caplog):
    from routing.runtime.usage.spool import dumps_line, parse_lines

    whole = [dumps_line(rec(1)), dumps_line(rec(2))]
    path = tmp_path / "wal-1-1-1.jsonl"
    path.write_bytes(b"".join(whole) + dumps_line(rec(3))[:40])  # killed mid-write
    with caplog.at_level(logging.WARNING, logger="switchboard.usage"):
        assert [r["request_id"] for r in read_rows(path)] == ["req-1", "req-2"]
        assert [r["request_id"] for r in parse_lines([*whole, b'{"request_id": "req-3"'])] == ["req-1", "req-2"]
        assert [r["request_id"] for r in parse_lines(whole)] == ["req-1", "req-2"]
    torn = [r.getMessage() for r in caplog.records if "torn usage line" in r.getMessage()]
    assert torn == [f"skipping a torn usage line in usage file {path}", "skipping a torn usage line in the usage queue"]


def test_a_queued_record_is_held_as_its_journal_line_not_as_the_dict(tmp_path):
    """What waits for the writer is the record's JSON line: the memory of a backlog (the peak of a
    burst the writer has not caught up with) is about a third of the dicts' (docs/usage-records.md#queue)."""
    import tracemalloc

    sink = UsageSink(spool_dir=tmp_path, insert=Switch())
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(2000):  # each record made and queued, as the request path does
            sink.record(rec(n, trail=[["op-chat", "ok"]], cost=0.000123, price_version="v1"))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    line = len(usage.spool.dumps_line(rec(1999, trail=[["op-chat", "ok"]], cost=0.000123, price_version="v1")))
    assert sink.memory_count() == 2000
    assert held / 2000 < line + 100, f"{held / 2000:.0f} bytes held a record against a {line}-byte line"


@pytest.mark.django_db
def test_one_json_log_line_per_request_without_secrets(tmp_path, caplog):
    logger = logging.getLogger("switchboard.requests")
    logger.addHandler(caplog.handler)
    try:
        caplog.set_level(logging.INFO, logger="switchboard.requests")
        sink = UsageSink(spool_dir=tmp_path, insert=Switch())
        sink.record(rec(1, fallback_reason="upstream_429", api_key="sk-secret-value"))
        sink.flush_now()
        sink.flush_now()
    finally:
        logger.removeHandler(caplog.handler)
    lines = [r.getMessage() for r in caplog.records if r.name == "switchboard.requests"]
    assert len(lines) == 1
    data = orjson.loads(lines[0])
    assert data["request_id"] == "req-1" and data["model"] == "op-fast" and data["model_used"] == "op-chat"
    assert data["fallback_reason"] == "upstream_429" and data["status"] == 200 and data["org"] == "acme"
    assert "sk-secret-value" not in lines[0] and "key_prefix" not in data


def test_record_is_cheap_and_counts_in_the_backlog(tmp_path):
    sink = UsageSink(spool_dir=tmp_path)
    started = time.perf_counter()
    for n in range(1000):
        sink.record(request_id=f"r{n}", status=200)
    assert (time.perf_counter() - started) < 0.5
    assert sink.backlog() == 1000


def test_the_process_holds_one_sink():
    sink = current().usage
    before = sink.backlog()
    sink.record(request_id="module-level-1", status=200)
    assert sink.backlog() == before + 1
    sink._pending.pop()


def test_sigterm_spools_pending_records_before_the_process_dies(tmp_path):
    script = f"""
import os, signal, django
os.environ["DJANGO_SETTINGS_MODULE"] = "gateway_project.settings"
os.environ["DATABASE_URL"] = "sqlite:///{tmp_path}/missing/db.sqlite3"
os.environ["SWITCHBOARD_USAGE_SPOOL_DIR"] = "{tmp_path}/spool"
django.setup()
from routing.runtime import usage
sink = usage.UsageSink()
for n in range(3):
    sink.record(request_id=f"sig-{{n}}", status=200)
assert usage.install_signal_handlers(sink)
os.kill(os.getpid(), signal.SIGTERM)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == -15, result.stderr
    files = list((tmp_path / "spool").glob("spool-*.jsonl"))
    assert len(files) == 1
    assert [orjson.loads(line)["request_id"] for line in files[0].read_bytes().splitlines()] == [
        "sig-0",
        "sig-1",
        "sig-2",
    ]


@pytest.mark.django_db(transaction=True)
def test_nul_and_lone_surrogates_are_escaped_never_dropped(tmp_path):
    # "chat-a\0" is what a client sends as a model id (a 404 that still leaves its row);
    # PostgreSQL refuses NUL in text and lone surrogates are not UTF-8.
    sink = UsageSink(spool_dir=tmp_path)
    sink.record(rec(1, requested_model="chat-a\x00", status=404, error_code="model_not_found"))
    sink.record(rec(2, requested_model="bad-\ud800-id"))
    assert sink.flush_now()
    rows = dict(UsageRecord.objects.values_list("request_id", "requested_model"))
    assert rows == {"req-1": "chat-a\\x00", "req-2": "bad-\\ud800-id"}
    assert not list(tmp_path.glob("rejected-*"))


@pytest.mark.django_db(transaction=True)
def test_every_queued_record_is_in_the_journal_until_committed_then_the_journal_is_gone(tmp_path):
    sink = UsageSink(spool_dir=tmp_path, pid=dead_pid())
    for n in range(3):
        sink.record(rec(n))
    journal = [row["request_id"] for path in tmp_path.glob("wal-*.jsonl") for row in read_rows(path)]
    assert journal == ["req-0", "req-1", "req-2"]  # on disk before any flush, as a kill -9 would leave it

    # A new process adopts the dead one's journal and writes each record once, even if some were committed.
    db_insert([rec(0)])
    heir = UsageSink(spool_dir=tmp_path)
    assert heir.adopt_orphans() == 1
    assert heir.flush_now()
    assert sorted(UsageRecord.objects.values_list("request_id", flat=True)) == ["req-0", "req-1", "req-2"]
    assert list(tmp_path.iterdir()) == []

    sink2 = UsageSink(spool_dir=tmp_path)
    sink2.record(rec(7))
    assert sink2.flush_now()
    assert list(tmp_path.glob("wal-*")) == []  # trimmed once its batch is committed


def test_a_long_outage_merges_small_journal_files_into_one_spool_file(tmp_path):
    switch = Switch()
    switch.down = True
    sink = UsageSink(spool_dir=tmp_path, insert=switch)
    for n in range(usage.queue.MAX_JOURNAL_FILES + 2):  # one record per flush, as at low traffic
        sink.record(rec(n))
        assert not sink.drain()
    assert len(list(tmp_path.glob("wal-*"))) <= usage.queue.MAX_JOURNAL_FILES + 1
    spooled = [row["request_id"] for path in tmp_path.glob("spool-*.jsonl") for row in read_rows(path)]
    assert len(spooled) == len(set(spooled)) >= usage.queue.MAX_JOURNAL_FILES
    assert sink.backlog() == usage.queue.MAX_JOURNAL_FILES + 2


def test_request_log_line_keeps_zero_and_false_and_leaves_out_none_and_empty():
    from routing.runtime.observe.request_log import log_line

    line = orjson.loads(
        log_line(
            {
                "request_id": "r",
                "attempts": 0,
                "streamed": False,
                "ttft_ms": None,
                "error_code": "",
                "latency_ms": 12.34567,
            }
        )
    )
    assert line == {"event": "request", "request_id": "r", "attempts": 0, "streamed": False, "latency_ms": 12.346}


def test_the_journal_sync_fsyncs_the_file_that_holds_the_records(tmp_path, monkeypatch):
    """The power-loss bound (SWITCHBOARD_USAGE_FSYNC_S, docs/usage-records.md) rests on this fsync."""
    import os

    real_fsync = os.fsync
    synced: list[tuple[int, int, int]] = []  # (device, inode, size) of the file at each fsync

    def spy(fd: int) -> None:
        st = os.fstat(fd)
        synced.append((st.st_dev, st.st_ino, st.st_size))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    sink = UsageSink(spool_dir=tmp_path, pid=dead_pid(), fsync_s=0)
    sink.record(rec(1))
    sink.record(rec(2))
    (journal,) = tmp_path.glob("wal-*.jsonl")
    st = journal.stat()
    sink.sync_journal()
    # The journal itself, holding both records when it was synced.
    assert synced == [(st.st_dev, st.st_ino, st.st_size)], "the usage journal was not fsynced"
    assert [row["request_id"] for row in read_rows(journal)] == ["req-1", "req-2"]

    synced.clear()
    sink.sync_journal()  # nothing written since the last sync: nothing to fsync
    assert synced == []
    sink.record(rec(3))
    sink.sync_journal()
    assert [(dev, ino) for dev, ino, _ in synced] == [(st.st_dev, st.st_ino)]


def test_the_journal_refused_by_the_disk_says_so_once_waits_5_s_then_writes_a_private_file(
    tmp_path, monkeypatch, caplog
):
    """Found by mutation testing (Journal.append / _open): the disk-refusal path, the file's name and mode."""
    from routing.runtime.usage import spool

    now = [100.0]
    monkeypatch.setattr(spool, "time", types.SimpleNamespace(monotonic=lambda: now[0], time_ns=time.time_ns))
    target = tmp_path / "spool"
    target.write_text("a file where the directory should be")  # the disk refuses: mkdir fails
    journal = spool.Journal(lambda: target, 4242)
    with caplog.at_level(logging.ERROR, logger="switchboard.usage"):
        journal.append(b'{"a":1}\n')
        journal.append(b'{"a":2}\n')  # within 5 s: not tried again, not logged again
        now[0] += 4.9
        journal.append(b'{"a":3}\n')
    refusals = [r for r in caplog.records if "cannot append to the usage journal" in r.getMessage()]
    assert len(refusals) == 1 and str(target) in refusals[0].getMessage()
    target.unlink()
    now[0] += 0.2  # 5.1 s after the refusal: the disk is tried again
    journal.append(b'{"a":4}\n')
    (path,) = target.glob("*")
    assert path == journal.path
    assert path.name.startswith(f"{spool.JOURNAL_PREFIX}4242-") and path.name.endswith("-1.jsonl")
    assert path.stat().st_mode & 0o777 == 0o600  # usage records are the operator's alone
    assert path.read_bytes() == b'{"a":4}\n'
    journal.seal(journal.rotate()[0])  # the writer took the file: the next append opens a new one
    path.unlink()
    target.rmdir()
    target.write_text("refused again")
    with caplog.at_level(logging.ERROR, logger="switchboard.usage"):
        journal.append(b'{"a":5}\n')  # a new refusal after a success is said again
    assert len([r for r in caplog.records if "cannot append to the usage journal" in r.getMessage()]) == 2


def test_a_journal_line_escapes_lone_surrogates_in_keys_values_and_lists_and_writes_odd_types_as_text():
    """Found by mutation testing (spool.dumps_line / _scrub / _json_default): every branch, read back."""
    from datetime import UTC, datetime
    from decimal import Decimal
    from pathlib import Path

    from routing.runtime.usage import spool

    row = {
        "request_id": "r-\ud800",  # a lone surrogate: orjson refuses the row, then it is escaped
        "trail": [("m-\udfff", "ok"), ["x"]],
        "nested": {"k-\ud801": "v"},
        "count": 3,
        "cost": Decimal("0.125"),
        "created_at": datetime(2026, 12, 6, 4, 30, tzinfo=UTC),
        "other": Path("/x"),
    }
    line = spool.dumps_line(row)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    back = orjson.loads(line)
    assert back == {
        "request_id": "r-\\ud800",
        "trail": [["m-\\udfff", "ok"], ["x"]],
        "nested": {"k-\\ud801": "v"},
        "count": 3,
        "cost": 0.125,
        "created_at": "2026-12-06T04:30:00+00:00",
        "other": "/x",
    }
    plain = spool.dumps_line({"request_id": "r", "cost": Decimal("1.5")})  # nothing to escape: one pass
    assert plain.endswith(b"\n") and orjson.loads(plain) == {"request_id": "r", "cost": 1.5}
