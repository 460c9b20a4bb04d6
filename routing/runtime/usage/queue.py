"""The in-memory queue of usage records and the process's writer (docs/usage-records.md).

The request path calls `record(...)`: the record's JSON line goes to one deque and
to the journal (one write(), routing.runtime.usage.spool), no database or fsync. The
queue holds those lines, not the record dicts: a third of the memory while records
wait, nothing for the garbage collector to walk, and the in-database batch
(PostgreSQL, SQLite) sends them as they are; the writer parses one batch at a time
(docs/usage-records.md#queue). A background writer (`run_writer`, on the serving loop)
hands batches to one dedicated daemon thread that inserts them
(routing.runtime.usage.writer); `record_id` is unique, so writing the same record twice
is harmless and every replay below is idempotent.

When the database is unreachable, records stay in memory up to
SWITCHBOARD_USAGE_MEMORY_BOUND, then spill to JSON-lines spool files
(`spool-<pid>-<time_ns>-<n>.jsonl`, fsynced, renamed into place so no reader ever
sees half a file) in SWITCHBOARD_USAGE_SPOOL_DIR. Once the database answers again,
spool files are written oldest first, then memory; a file is deleted only after its
rows are committed. Files of a dead process (its pid no longer exists), journal
files included, are claimed by renaming them, so two live processes never replay
the same file. The spool directory must be on the machine's local disk (pids
identify owners).

Shutdown (`shutdown()`: lifespan, atexit, SIGTERM) tries the database for a few
seconds, then spools whatever is still in memory.

Rows that the database refuses for their content (IntegrityError/DataError, or a
value that cannot be converted) are written one by one and the refused ones go to
`rejected-<pid>.jsonl` in the spool directory, so one bad row never blocks the rest.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from routing.core.compact import compact
from routing.runtime.observe.request_log import log_requests
from routing.runtime.usage.spool import (
    JOURNAL_PREFIX,
    SPOOL_PREFIX,
    Journal,
    _dumps,
    _fsync_dir,
    _spool_pid,
    dumps_line,
    parse_lines,
    pid_alive,
    read_rows,
    sync_files,
    unlink_quietly,
)
from routing.runtime.usage.streams import StreamJournal, claim_orphans, interrupted_rows
from routing.runtime.usage.writer import DaemonWorker, Pace, _Poison, db_insert

log = logging.getLogger("switchboard.usage")

Row = dict[str, Any]
InsertFn = Callable[[list[Row]], None]
MAX_JOURNAL_FILES = 64  # rotated journal files held during an outage before they are merged into a spool file


class UsageSink:
    """The in-memory queue, the spool and the database writer of one process."""

    def __init__(
        self,
        *,
        spool_dir: str | os.PathLike | None = None,
        memory_bound: int | None = None,
        batch: int | None = None,
        flush_s: float | None = None,
        using: str = "default",
        insert: InsertFn | None = None,
        pid: int | None = None,
        fsync_s: float | None = None,
        journal: bool = True,
    ) -> None:
        self._spool_dir = Path(spool_dir) if spool_dir is not None else None
        self._memory_bound = memory_bound
        self._batch = batch
        self._flush_s = flush_s
        self.using = using
        self._insert = insert
        self.pid = pid if pid is not None else os.getpid()
        self._pending: deque[bytes] = deque()  # records' JSON lines, appended by the request path
        self._staged: list[bytes] = []  # lines taken by the writer, not yet committed
        self._logged = 0  # how many of _staged (from its front) have had their request log line
        self._mem_lock = threading.Lock()  # guards _staged swaps; never held across I/O
        self._db_lock = threading.Lock()  # one drain at a time
        self._spool_lock = threading.Lock()
        self._spooled: dict[str, int] = {}  # own spool file name -> rows
        self._seq = 0
        self.down_since: float | None = None  # wall time of the first failure of the current outage
        self.last_error: str = ""
        self._worker: DaemonWorker | None = None
        self._closing = False
        self._journal = Journal(lambda: self.spool_dir, self.pid)
        self._journal_lock = threading.Lock()  # serialises journal appends and rotations (never held across fsync)
        self._journal_files: list[Path] = []  # rotated journal files whose records are all in _staged
        self._fsync_s = fsync_s
        self.journal_enabled = journal
        self._unsealed: list[int | None] = []
        self._synced: set[Path] = set()  # rotated journal files already fsynced (during an outage)
        self.streams = StreamJournal(lambda: self.spool_dir, self.pid)  # streams open (streams.py)
        self._pace = Pace(hurry=self.behind)  # the Python insert path's pauses (writer.py)

    # ------------------------------------------------------------------ settings

    @property
    def spool_dir(self) -> Path:
        if self._spool_dir is not None:
            return self._spool_dir
        from django.conf import settings

        return Path(settings.SWITCHBOARD_USAGE_SPOOL_DIR)

    def _setting(self, own: Any, name: str) -> Any:
        if own is not None:
            return own
        from django.conf import settings

        return getattr(settings, name)

    @property
    def memory_bound(self) -> int:
        return int(self._setting(self._memory_bound, "SWITCHBOARD_USAGE_MEMORY_BOUND"))

    @property
    def batch(self) -> int:
        return max(1, int(self._setting(self._batch, "SWITCHBOARD_USAGE_BATCH")))

    @property
    def flush_s(self) -> float:
        return float(self._setting(self._flush_s, "SWITCHBOARD_USAGE_FLUSH_S"))

    @property
    def fsync_s(self) -> float:
        return float(self._setting(self._fsync_s, "SWITCHBOARD_USAGE_FSYNC_S"))

    # ------------------------------------------------------------------ request path

    def record(self, fields: Mapping[str, Any] | None = None, /, **kw: Any) -> None:
        """Queue one usage record (a dict, which is taken over, or keywords). O(1), no I/O."""
        if fields is None:
            row = kw
        elif kw:
            row = {**fields, **kw}
        else:
            row = fields  # type: ignore[assignment]
        if "created_at" not in row:
            row["created_at"] = time.time()
        line = compact(dumps_line(row))  # held until written: not in orjson's 4 KB buffer
        if not self.journal_enabled:
            self._pending.append(line)
            return
        with self._journal_lock:  # the journal file then holds exactly what _pending holds
            self._pending.append(line)
            self._journal.append(line)

    def discard(self) -> int:
        """Drop every queued record and return how many (tests that drive the request path in-process)."""
        with self._mem_lock:
            dropped = len(self._pending) + len(self._staged)
            with self._journal_lock:
                self._pending.clear()
                fd, path = self._journal.rotate()
            self._staged.clear()
            self._logged = 0
            files, self._journal_files = self._journal_files, []
        self._journal.seal(fd)
        self._remove([*files, *([path] if path else [])])
        return dropped

    def backlog(self) -> int:
        """Records not yet in the database: memory plus spool files."""
        return len(self._pending) + len(self._staged) + sum(list(self._spooled.values()))

    def memory_count(self) -> int:
        return len(self._pending) + len(self._staged)

    def behind(self) -> bool:
        """The writer falls behind: a quarter of the memory bound waits (docs/usage-records.md#batch).
        It then writes without pausing between chunks, before the records would spill to disk."""
        return self.memory_count() >= self.memory_bound // 4

    # ------------------------------------------------------------------ draining

    def _take_pending(self) -> list[bytes]:
        """Move queued records' lines to the caller (call under _mem_lock).

        The journal rotates in the same step, so the rotated file (kept in
        _journal_files until its rows are committed or spooled) holds exactly them.
        """
        taken: list[bytes] = []
        pending = self._pending
        with self._journal_lock:
            while True:
                try:
                    taken.append(pending.popleft())
                except IndexError:
                    break
            fd, path = self._journal.rotate() if taken else (None, None)
        if path is not None:
            self._journal_files.append(path)
            self._unsealed.append(fd)  # fsynced and closed by _seal() once _mem_lock is released
        return taken

    def _log_once(self, rows: list[Row], first: int, count: int) -> None:
        """The request log lines of `rows` (parsed from the `count` lines at `first` in _staged) not
        logged yet (call under _mem_lock): a batch the database refused is written again, logged once."""
        fresh = rows[max(0, self._logged - first) :]
        self._logged = max(self._logged, first + count)
        if fresh:
            try:
                log_requests(fresh)
            except Exception:  # noqa: BLE001 - a log failure must not lose the record
                pass

    def _remove(self, files: list[Path]) -> None:
        """Delete journal files whose rows are committed or spooled."""
        unlink_quietly(files)
        self._synced.difference_update(files)

    def _seal(self) -> None:
        """fsync and close rotated journal files (outside _mem_lock: the request path must not wait)."""
        while self._unsealed:
            try:
                fd = self._unsealed.pop()
            except IndexError:
                return
            self._journal.seal(fd)

    def _do_insert(self, rows: list[Row], lines: list[bytes] | None = None) -> None:
        if self._insert is not None:
            self._insert(rows)
        else:
            db_insert(rows, using=self.using, lines=lines, pace=self._pace)

    def _write(self, rows: list[Row], lines: list[bytes] | None = None) -> bool:
        """Commit rows; False when the database is unreachable (records kept by the caller)."""
        from django.db import DatabaseError

        try:
            self._do_insert(rows, lines)
        except _Poison:
            self._write_one_by_one(rows)
        except DatabaseError as exc:  # OperationalError, InterfaceError, missing table...
            self._mark_down(exc)
            return False
        if self.down_since is not None:
            log.warning("usage database reachable again after %.1fs", time.time() - self.down_since)
            self.down_since = None
        return True

    def _write_one_by_one(self, rows: list[Row]) -> None:
        from django.db import DatabaseError

        rejected = []
        for row in rows:
            try:
                self._do_insert([row])
            except _Poison as exc:
                rejected.append({**row, "_rejected": str(exc)[:500]})
            except DatabaseError:
                raise
        if rejected:
            path = self.spool_dir / f"rejected-{self.pid}.jsonl"
            self.spool_dir.mkdir(parents=True, exist_ok=True)
            with open(path, "ab") as f:
                f.write(_dumps(rejected))
                f.flush()
                os.fsync(f.fileno())
            log.error("%d usage record(s) refused by the database; kept in %s", len(rejected), path)

    def _mark_down(self, exc: Exception) -> None:
        if self.down_since is None:
            self.down_since = time.time()
            log.warning("usage database unreachable (%s); keeping records in memory, then in %s", exc, self.spool_dir)
        self.last_error = str(exc)
        if self._insert is None:
            try:
                from django.db import connections

                connections[self.using].close()
            except Exception:  # noqa: BLE001 - the connection is already broken
                pass

    def drain(self) -> bool:
        """Write spool files (oldest first), then memory. True when nothing is left to write.

        Runs in a thread (writer thread, flush_now, shutdown); one drain at a time.
        """
        with self._db_lock:
            ok = self._drain_spool() and self._drain_memory()
            # Past the memory bound, or once an outage has rotated many small journal
            # files (one per flush with traffic), move memory to one spool file.
            if not ok and (self.memory_count() > self.memory_bound or len(self._journal_files) > MAX_JOURNAL_FILES):
                self.spill()
            return ok

    def _drain_spool(self) -> bool:
        for path in self._own_spool_files():
            rows = self._read_spool(path)
            if rows and not self._write(rows):
                return False
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            self._spooled.pop(path.name, None)
        return True

    def _drain_memory(self) -> bool:
        with self._mem_lock:
            self._staged.extend(self._take_pending())
            staged = self._staged
            todo = list(staged)
        self._seal()
        size = self.batch
        for i in range(0, len(todo), size):
            lines = todo[i : i + size]
            rows = parse_lines(lines)
            with self._mem_lock:
                if self._staged is not staged:  # spilled meanwhile: the spool file has them
                    return True
                self._log_once(rows, 0, len(lines))  # the committed chunks before it are gone from _staged
            if not self._write(rows, lines):
                with self._mem_lock:
                    unsynced = [p for p in self._journal_files if p not in self._synced]
                    self._synced.update(unsynced)
                sync_files(unsynced)  # held through the outage: make them survive a power loss too
                return False
            with self._mem_lock:
                if self._staged is not staged:  # spilled meanwhile: the spool file has them
                    return True
                del staged[: len(lines)]
                self._logged = max(0, self._logged - len(lines))
                done = [] if staged else self._journal_files
                if not staged:
                    self._journal_files = []
            self._remove(done)  # their rows are committed
        return True

    def flush_now(self) -> bool:
        """Synchronously write everything pending (tests, management commands). True when all is in."""
        return self.drain()

    # ------------------------------------------------------------------ spool

    def spill(self) -> int:
        """Move every record in memory to a new spool file (fsynced). Returns rows written."""
        with self._mem_lock:
            lines = self._staged + self._take_pending()
            if len(lines) > self._logged:
                self._log_once(parse_lines(lines[self._logged :]), self._logged, len(lines) - self._logged)
            self._staged = []
            self._logged = 0
            files, self._journal_files = self._journal_files, []
        self._seal()
        if not lines:
            self._remove(files)
            return 0
        try:
            self._write_spool(lines)
        except OSError:
            with self._mem_lock:  # disk failed too: keep them in memory rather than lose them
                self._staged[:0] = lines
                self._logged += len(lines)
                self._journal_files[:0] = files
            log.exception("cannot write usage spool file in %s; %d records stay in memory", self.spool_dir, len(lines))
            return 0
        self._remove(files)  # the fsynced spool file has their rows now
        return len(lines)

    def _write_spool(self, lines: list[bytes]) -> Path:
        with self._spool_lock:
            directory = self.spool_dir
            directory.mkdir(parents=True, exist_ok=True)
            self._seq += 1
            name = f"spool-{self.pid}-{time.time_ns()}-{self._seq}.jsonl"
            tmp = directory / (name + ".tmp")
            with open(tmp, "wb") as f:
                f.write(b"".join(lines))
                f.flush()
                os.fsync(f.fileno())
            path = directory / name
            os.replace(tmp, path)
            _fsync_dir(directory)
            self._spooled[name] = len(lines)
        log.info("spooled %d usage records to %s", len(lines), path)
        return path

    def _read_spool(self, path: Path) -> list[Row]:
        return read_rows(path)

    def sync_journal(self) -> None:
        """fsync the journal if its last fsync is older than SWITCHBOARD_USAGE_FSYNC_S (writer thread)."""
        if time.monotonic() - self._journal.last_fsync < self.fsync_s:
            return

        def dup() -> int | None:
            with self._journal_lock:
                return self._journal.dup_current()

        self._journal.fsync(dup)
        self.streams.sync()

    def _own_spool_files(self) -> list[Path]:
        directory = self.spool_dir
        prefix = f"{SPOOL_PREFIX}{self.pid}-"
        try:
            entries = [e for e in os.scandir(directory) if e.name.startswith(prefix) and e.name.endswith(".jsonl")]
        except FileNotFoundError:
            return []
        entries.sort(key=lambda e: (e.stat().st_mtime_ns, e.name))
        paths = [Path(e.path) for e in entries]
        for p in paths:
            if p.name not in self._spooled:
                self._spooled[p.name] = len(self._read_spool(p))
        return paths

    def adopt_orphans(self) -> int:
        """Claim spool files left by dead processes (rename into our name). Returns files claimed."""
        directory = self.spool_dir
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return 0
        claimed = 0
        with self._journal_lock, self._mem_lock:
            mine = {p.name for p in self._journal_files}
            if self._journal.path is not None:
                mine.add(self._journal.path.name)
        for name in names:
            owner = _spool_pid(name)
            if owner is None:
                continue
            earlier_self = owner == self.pid and name.startswith(JOURNAL_PREFIX) and name not in mine
            if not earlier_self and (owner == self.pid or pid_alive(owner)):
                continue
            if not (name.endswith(".jsonl") or name.endswith(".jsonl.tmp")):
                continue
            with self._spool_lock:
                self._seq += 1
                new = f"spool-{self.pid}-{time.time_ns()}-{self._seq}.jsonl"
            try:
                os.rename(directory / name, directory / new)
            except FileNotFoundError:  # another process claimed it first
                continue
            claimed += 1
            log.info("adopted usage file %s of dead process %s", name, owner)
        claimed += self._replay_streams(directory)
        if claimed:
            self._own_spool_files()  # count their rows into the backlog
        return claimed

    def _replay_streams(self, directory: Path) -> int:
        """The streams a dead process had open: one `interrupted` record each, in a new spool file
        (newer than that process's journal files, so a settled record of the same id wins)."""
        with self.streams._lock:  # its files are never taken while it creates them
            groups = claim_orphans(directory, self.pid, self.streams.stem)
        for group in groups:
            rows = interrupted_rows(group)
            if rows:
                self._write_spool([dumps_line(r) for r in rows])
                log.warning("%d stream(s) cut by the end of their process recorded as interrupted", len(rows))
            unlink_quietly(group)
        return len(groups)

    # ------------------------------------------------------------------ background

    def _submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future:
        if self._worker is None:
            self._worker = DaemonWorker("switchboard-usage-writer")
        return self._worker.submit(fn)

    async def run_writer(self) -> None:
        """Drain every SWITCHBOARD_USAGE_FLUSH_S off the loop; spill past the memory bound."""
        loop = asyncio.get_running_loop()
        await asyncio.wrap_future(self._submit(self.adopt_orphans))
        last_adopt = last_flush = time.monotonic()
        while True:
            await asyncio.sleep(min(self.flush_s, self.fsync_s))
            self._submit(self.sync_journal)
            if time.monotonic() - last_flush < self.flush_s:
                continue
            last_flush = time.monotonic()
            if time.monotonic() - last_adopt >= 30:
                last_adopt = time.monotonic()
                self._submit(self.adopt_orphans)
            if not (self._pending or self._staged or self._spooled):
                continue
            future = asyncio.wrap_future(self._submit(self.drain))
            while True:
                done, _ = await asyncio.wait({future}, timeout=self.flush_s)
                if done:
                    break
                if self.memory_count() > self.memory_bound:  # the database hangs: bound memory anyway
                    await loop.run_in_executor(None, self.spill)
            try:
                future.result()
            except Exception:  # noqa: BLE001 - keep writing; records are still held
                log.exception("usage writer drain failed")

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Flush to the database if it answers within timeout_s, else spool what is left."""
        self.streams.remove_if_idle()  # streams still open keep their files: the next process records them
        if not self._pending and not self._staged and not self._spooled:
            try:
                if not self._own_spool_files():
                    self.spill()  # nothing to write: closes and removes the journal files
                    return
            except OSError:
                return
        done = threading.Event()

        def attempt() -> None:
            try:
                self.drain()
            except Exception:  # noqa: BLE001
                log.exception("usage flush at shutdown failed")
            finally:
                done.set()

        threading.Thread(target=attempt, name="switchboard-usage-shutdown", daemon=True).start()
        done.wait(timeout_s)
        if self.memory_count():
            self.spill()

    def spool_now(self) -> None:
        """Signal-handler safe: spool memory without touching the database; skip if busy."""
        if self._spool_lock.locked() or not self._mem_lock.acquire(blocking=False):
            return
        self._mem_lock.release()
        self.spill()


# --------------------------------------------------------------------------- the process's sink


async def run_writer(sink: UsageSink) -> None:
    """The process's usage writer; started once on the serving loop (gateway_project.process)."""
    install_signal_handlers(sink)
    await sink.run_writer()


_exit_hooked: set[int] = set()


def _register_exit_hooks(sink: UsageSink) -> None:
    if id(sink) not in _exit_hooked:
        _exit_hooked.add(id(sink))
        atexit.register(sink.shutdown)


def install_signal_handlers(sink: UsageSink) -> bool:
    """Chain SIGTERM/SIGINT: spool memory to disk first, then the previous handler.

    Servers that handle SIGTERM gracefully (daphne via Twisted, uvicorn) then exit
    normally and the atexit hook flushes; a server that would die on the default
    action still leaves its records on disk. Only possible from the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        _register_exit_hooks(sink)
        return False
    _register_exit_hooks(sink)
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(signum)
        if getattr(previous, "_switchboard_usage", False):
            continue
        signal.signal(signum, _chained(previous, sink))
    return True


def _chained(previous: Any, sink: UsageSink) -> Callable[[int, Any], None]:
    def handler(signum: int, frame: Any) -> None:
        try:
            sink.spool_now()
        except Exception:  # noqa: BLE001 - never block the server's own shutdown
            pass
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            os.kill(os.getpid(), signum)

    handler._switchboard_usage = True  # type: ignore[attr-defined]
    return handler
