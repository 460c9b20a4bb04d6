"""Streams accounted from their first frame (docs/usage-records.md#streams).

A stream's usage record is journaled when the stream commits and settled when it ends:

- at the commit, `StreamJournal.open` appends the record as it stands (status 200, the prompt
  estimate, no completion yet, `error_code` `interrupted`) to this process's streams file
  `streams-<pid>-<ns>-<n>.jsonl`: one write() to the OS, no fsync;
- while it relays, `OpenStream.relayed` counts the SSE frames of each chunk into the stream's
  slot of a memory-mapped counter file `streams-<pid>-<ns>.bin` *before* the chunk is sent:
  a C-level count and one store in memory per chunk, no system call. A page of a shared file
  mapping is the operating system's once written, so a `kill -9` loses no frame relayed;
- at the end, the settled record goes through the usage queue like any other (same
  `record_id`), then a close line marks the stream done.

After a `kill -9`, the next process (`UsageSink.adopt_orphans`) writes every stream of the dead
process that was opened and never closed: the prompt estimate, completion tokens = the frames
relayed (at least one token a frame), the cost at the prices journaled with it, `interrupted`.
They go to a new spool file, written after the dead process's own journal files (older), so
that a settled record journaled just before the kill wins the `record_id` (exactly one record).
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from routing.runtime.usage.spool import dumps_line, pid_alive

log = logging.getLogger("switchboard.usage")

PREFIX = "streams-"
SLOTS = 65_536  # streams open at once in one process that get a counter (512 KB sparse file)
ROTATE_BYTES = 8 << 20  # the streams file is rewritten with only the open streams past this size
INTERRUPTED = "interrupted"  # the error_code of a stream cut by a crash (docs/usage-records.md#streams)
_COUNT = struct.Struct("<Q")


class OpenStream:
    """One committed stream: its record id and frame counter (request path: `relayed` per chunk)."""

    __slots__ = ("record_id", "slot", "counters", "frames")

    def __init__(self, record_id: str, slot: int, counters: memoryview | None) -> None:
        self.record_id = record_id
        self.slot = slot
        self.counters = counters
        self.frames = 0

    def relayed(self, chunk: bytes) -> None:
        """Count the frames of `chunk` before it is sent (one C-level count, one store in memory)."""
        self.frames += chunk.count(b"data:")
        if self.counters is not None:
            self.counters[self.slot] = self.frames


class StreamJournal:
    """The streams file and counter file of one process (loop thread; the writer only syncs them)."""

    def __init__(self, directory: Callable[[], Path], pid: int) -> None:
        self._directory = directory
        self.pid = pid
        self.stem = ""  # <pid>-<ns>: names this process's files
        self._seq = 0
        self._fd: int | None = None
        self._size = 0
        self._map: mmap.mmap | None = None
        self._counters: memoryview | None = None
        self._free: list[int] = []
        self._next = 0
        self._open: dict[str, tuple[bytes, int]] = {}  # record_id -> (its open line, slot)
        self._lock = threading.Lock()  # open/close on the loop, rotation, fsync on the writer
        self._failed_at = 0.0

    def _start(self) -> None:
        directory = self._directory()
        directory.mkdir(parents=True, exist_ok=True)
        self.stem = f"{self.pid}-{time.time_ns()}"
        with open(directory / f"{PREFIX}{self.stem}.bin", "w+b") as f:
            f.truncate(SLOTS * _COUNT.size)
            self._map = mmap.mmap(f.fileno(), SLOTS * _COUNT.size)
        self._counters = memoryview(self._map).cast("Q")
        self._new_file()

    def _new_file(self) -> None:
        self._seq += 1
        path = self._directory() / f"{PREFIX}{self.stem}-{self._seq}.jsonl"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        old, self._fd, self._size = self._fd, fd, 0
        if self._open:  # the streams still open, then the old file may go
            self._write(b"".join(line for line, _ in self._open.values()))
        if old is not None:
            os.close(old)
            try:
                os.unlink(self._directory() / f"{PREFIX}{self.stem}-{self._seq - 1}.jsonl")
            except FileNotFoundError:
                pass

    def _write(self, data: bytes) -> None:
        assert self._fd is not None
        os.write(self._fd, data)
        self._size += len(data)

    def open(self, row: dict[str, Any], prices: tuple[float | None, float | None]) -> OpenStream | None:
        """Journal a committed stream's record; None when the disk refuses (the stream is then
        recorded when it ends, as before)."""
        record_id = row["record_id"]
        try:
            with self._lock:
                if self._fd is None:
                    if self._failed_at and time.monotonic() - self._failed_at < 5:
                        return None
                    self._start()
                elif self._size > ROTATE_BYTES:
                    self._new_file()
                slot = self._free.pop() if self._free else self._next
                if slot == self._next:
                    self._next += 1
                counters = self._counters
                if slot >= SLOTS:
                    slot, counters = -1, None
                elif counters is not None:
                    counters[slot] = 0  # before the line: a reused slot never shows a former count
                head = orjson.dumps({"slot": slot, "prices": list(prices), "record_id": record_id})
                line = head[:-1] + b',"row":' + dumps_line(row)[:-1] + b"}\n"
                self._write(line)
                self._open[record_id] = (line, slot)
        except OSError as exc:
            self._failed_at = time.monotonic()
            log.warning("cannot journal an open stream in %s (%s); it is recorded when it ends", self._directory(), exc)
            return None
        return OpenStream(record_id, slot, counters)

    def close(self, stream: OpenStream) -> None:
        """The stream's settled record is queued (and journaled): mark it done."""
        try:
            with self._lock:
                if self._open.pop(stream.record_id, None) is None:
                    return
                if stream.slot >= 0:
                    self._free.append(stream.slot)
                if self._fd is not None:
                    self._write(b'{"closed":"' + stream.record_id.encode() + b'"}\n')
        except OSError:
            pass  # replayed as interrupted; the settled record has the same record_id and is older

    def remove_if_idle(self) -> None:
        """At a clean shutdown with no stream open: this process's files have nothing to replay."""
        with self._lock:
            if self._open or self._fd is None:
                return
            os.close(self._fd)
            self._fd = None
            if self._counters is not None:
                self._counters.release()
                self._counters = None
            if self._map is not None:
                try:
                    self._map.close()
                except BufferError:  # a view of it still referenced: the process exit unmaps it
                    pass
                self._map = None
            directory = self._directory()
            for path in (directory / f"{PREFIX}{self.stem}-{self._seq}.jsonl", directory / f"{PREFIX}{self.stem}.bin"):
                try:
                    path.unlink()
                except OSError:
                    pass

    def sync(self) -> None:
        """Writer thread, every SWITCHBOARD_USAGE_FSYNC_S: the power-loss bound of the streams files."""
        with self._lock:
            fd = os.dup(self._fd) if self._fd is not None else None
            mapped = self._map
        if fd is not None:
            try:
                os.fsync(fd)
            except OSError:
                pass
            finally:
                os.close(fd)
        if mapped is not None:
            try:
                mapped.flush()
            except (OSError, ValueError):
                pass


def _stem_of(name: str) -> str | None:
    """`<pid>-<ns>` of a streams file name, or None."""
    if not name.startswith(PREFIX):
        return None
    rest = name[len(PREFIX) :].split(".", 1)[0].split("-")
    return f"{rest[0]}-{rest[1]}" if len(rest) >= 2 and rest[0].isdigit() else None


def claim_orphans(directory: Path, pid: int, own_stem: str) -> list[list[Path]]:
    """Rename the streams files of dead processes (or of an earlier process with this pid) into a
    new stem of ours, one group per dead process's files; another live process never gets them."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    groups: dict[str, list[str]] = {}
    for name in names:
        stem = _stem_of(name)
        if stem is None or stem == own_stem:
            continue
        owner = int(stem.split("-")[0])
        if owner != pid and pid_alive(owner):
            continue
        groups.setdefault(stem, []).append(name)
    claimed: list[list[Path]] = []
    for stem, members in groups.items():
        new_stem = f"{pid}-{time.time_ns()}"
        moved = []
        for name in sorted(members):
            new = name.replace(stem, new_stem, 1)
            try:
                os.rename(directory / name, directory / new)
            except FileNotFoundError:
                continue  # another process claimed it first
            moved.append(directory / new)
        if moved:
            claimed.append(moved)
    return claimed


def interrupted_rows(files: list[Path]) -> list[dict[str, Any]]:
    """The records of the streams that were opened and never closed, with what was relayed."""
    counters: bytes = b""
    opened: dict[str, dict[str, Any]] = {}
    closed: set[str] = set()
    for path in sorted(
        files, key=lambda p: int(p.name.rsplit("-", 1)[-1].split(".")[0]) if p.suffix == ".jsonl" else 0
    ):
        if path.suffix == ".bin":
            counters = path.read_bytes()
            continue
        for line in path.read_bytes().splitlines():
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # a torn last line (killed mid-write)
            if not isinstance(entry, dict):
                continue
            if "closed" in entry:
                closed.add(entry["closed"])
            elif isinstance(entry.get("row"), dict):
                opened[entry["record_id"]] = entry
    rows = []
    for record_id, entry in opened.items():
        if record_id in closed:
            continue
        row = entry["row"]
        slot = entry.get("slot", -1)
        frames = 0
        if isinstance(slot, int) and 0 <= slot and (slot + 1) * _COUNT.size <= len(counters):
            frames = _COUNT.unpack_from(counters, slot * _COUNT.size)[0]
        row["completion_tokens"] = max(int(row.get("completion_tokens") or 0), frames)
        row["cost"] = _cost(entry.get("prices"), row.get("prompt_tokens"), row["completion_tokens"], row.get("cost"))
        row["error_code"] = INTERRUPTED
        rows.append(row)
    return rows


def _cost(prices: Any, prompt: Any, completion: int, journaled: Any) -> Any:
    if not isinstance(prices, list) or len(prices) != 2 or journaled is None:
        return journaled  # unknown at the commit (a price missing): stays unknown
    total = 0.0
    for tokens, price in ((prompt or 0, prices[0]), (completion, prices[1])):
        if not tokens:
            continue
        if price is None:
            return None  # as routing.runtime.usage.pricing.cost: tokens of a kind without a price
        total += tokens * price / 1_000_000
    return round(total, 8)
