"""Usage records on local disk: the write-ahead journal and the spool files.

Every record is appended to this process's journal (`wal-<pid>-<ns>-<n>.jsonl`) as
it is queued: one `write()` to the OS, no fsync per request, so a process killed
with SIGKILL loses nothing it answered. The writer fsyncs the journal every
SWITCHBOARD_USAGE_FSYNC_S (the bound of what a power loss can take) and rotates
it each time it takes a batch; a rotated journal file is deleted once its batch is
committed (or spooled). Spool files (`spool-<pid>-<ns>-<n>.jsonl`) hold records the
database could not take; journal files of a dead process are adopted as spool
files and replayed, and `record_id` makes every replay idempotent.
See docs/usage-records.md#journal.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger("switchboard.usage")

Row = dict[str, Any]
SPOOL_PREFIX = "spool-"
JOURNAL_PREFIX = "wal-"


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _scrub(value: Any) -> Any:
    """Strings orjson refuses (lone surrogates) escaped, so such a record can still be written."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {str(_scrub(k)): _scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    return value


def dumps_line(row: Row) -> bytes:
    """One record as a JSON line."""
    try:
        return orjson.dumps(row, default=_json_default, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:
        return orjson.dumps(_scrub(row), default=_json_default, option=orjson.OPT_APPEND_NEWLINE)


def _dumps(rows: Iterable[Row]) -> bytes:
    return b"".join(dumps_line(r) for r in rows)


def _array(lines: Iterable[bytes]) -> bytes:
    """JSON lines as one JSON array (their newlines are whitespace between items)."""
    return b"[" + b",".join(lines) + b"]"


def json_array(rows: list[Row], lines: list[bytes] | None) -> bytes:
    """A batch as one JSON array for the database to parse: the rows' journal lines when the
    caller has one per row, else encoded here in one call (routing.runtime.usage.pgbatch, .sqlitebatch)."""
    if lines is not None and len(lines) == len(rows):
        return _array(lines)
    try:
        return orjson.dumps(rows, default=_json_default)
    except TypeError:  # a lone surrogate: escaped line by line as the journal does
        return _array(dumps_line(r) for r in rows)


def _each_line(lines: Iterable[bytes], where: object) -> list[Row]:
    """Records line by line; a line that is not a JSON object (a torn last line of a killed
    process's file) is skipped with a warning naming `where`."""
    rows: list[Row] = []
    for line in lines:
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            log.warning("skipping a torn usage line in %s", where)
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def parse_lines(lines: list[bytes]) -> list[Row]:
    """Records from their JSON lines (as `dumps_line` made them), in one parse for the whole list."""
    try:
        rows = orjson.loads(_array(lines))
    except orjson.JSONDecodeError:  # not all from dumps_line: line by line, as a file is read
        return _each_line(lines, "the usage queue")
    return [r for r in rows if isinstance(r, dict)]


def read_rows(path: Path) -> list[Row]:
    """The records of a spool or journal file; a torn last line (killed mid-write) is skipped."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return _each_line(data.splitlines(), f"usage file {path}")


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def _spool_pid(name: str) -> int | None:
    """The owner pid in `spool-<pid>-....jsonl[.tmp]` or `wal-<pid>-....jsonl`."""
    for prefix in (SPOOL_PREFIX, JOURNAL_PREFIX):
        if name.startswith(prefix):
            head = name[len(prefix) :].split("-", 1)[0]
            return int(head) if head.isdigit() else None
    return None


def _fsync_fd(fd: int) -> None:
    """fsync and close `fd`, quietly: a failure leaves the data as the OS has it."""
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_path(path: Path) -> None:
    """fsync a file or directory by path, quietly."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    _fsync_fd(fd)


def _fsync_dir(directory: Path) -> None:
    _fsync_path(directory)


class Journal:
    """The write-ahead file of one process. `append` runs on the request path: one write(), no fsync.

    The caller serialises `append` and `rotate` (UsageSink holds its journal lock);
    `fsync` and the closing of a rotated file run on the writer thread, outside it.
    """

    def __init__(self, directory: Callable[[], Path], pid: int) -> None:
        self._directory = directory
        self.pid = pid
        self._fd: int | None = None
        self.path: Path | None = None
        self._seq = 0
        self._dirty = False
        self._failed_at = 0.0  # last time the disk refused; retried after a few seconds
        self.last_fsync = time.monotonic()
        self._fsync_lock = threading.Lock()

    def _open(self) -> None:
        directory = self._directory()
        directory.mkdir(parents=True, exist_ok=True)
        self._seq += 1
        path = directory / f"{JOURNAL_PREFIX}{self.pid}-{time.time_ns()}-{self._seq}.jsonl"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.path = path

    def append(self, line: bytes) -> None:
        """Hand one record line to the OS; a disk failure is logged and the record stays in memory only."""
        try:
            if self._fd is None:
                if self._failed_at and time.monotonic() - self._failed_at < 5:
                    return
                self._open()
            os.write(self._fd, line)  # type: ignore[arg-type]
            self._dirty = True
        except OSError as exc:
            if not self._failed_at:
                log.error(
                    "cannot append to the usage journal in %s (%s); records are in memory only", self._directory(), exc
                )
            self._failed_at = time.monotonic()
            self._close_quietly()
            return
        self._failed_at = 0.0

    def _close_quietly(self) -> None:
        fd, self._fd, self.path = self._fd, None, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def rotate(self) -> tuple[int | None, Path | None]:
        """Detach the current file (the next append starts a new one); return its fd and path to `seal`."""
        fd, path = self._fd, self.path
        self._fd, self.path, self._dirty = None, None, False
        return fd, path

    def seal(self, fd: int | None) -> None:
        """Close a rotated file. No fsync: its rows are on their way to the database; if the
        database refuses them, `sync_files` makes them durable then (off the request path)."""
        if fd is None:
            return
        try:
            os.close(fd)
        except OSError:
            pass

    def fsync(self, dup: Callable[[], int | None]) -> None:
        """fsync the current file; `dup` returns a duplicate of its fd taken under the append lock."""
        self.last_fsync = time.monotonic()
        fd = dup()
        if fd is not None:
            _fsync_fd(fd)

    def dup_current(self) -> int | None:
        """A duplicate of the current fd when it has unsynced writes (call under the append lock)."""
        if self._fd is None or not self._dirty:
            return None
        self._dirty = False
        try:
            return os.dup(self._fd)
        except OSError:
            return None


def sync_files(paths: Iterable[Path]) -> None:
    """fsync rotated journal files whose rows the database could not take (the power-loss bound)."""
    for path in paths:
        _fsync_path(path)


def unlink_quietly(paths: Iterable[Path]) -> None:
    for path in paths:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("cannot delete usage journal file %s (%s)", path, exc)
