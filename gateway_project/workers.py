"""`manage.py serve --workers N`: N worker processes of one machine sharing one listening socket.

uvicorn runs its own workers (`--workers N`, which restarts a worker that dies); daphne has
no such mode, so `supervise_daphne` binds the socket here, starts N `daphne --fd` children
that inherit it, restarts a child that dies (with a backoff) and forwards SIGTERM/SIGINT.
Either way the workers share one metrics directory (prometheus_client's multiprocess mode,
PROMETHEUS_MULTIPROC_DIR): created fresh here, cleaned on exit, and the files of a worker
that exited are marked dead, so every worker's /metrics shows the whole machine.
See docs/scale-out.md.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gateway_project import edge
from gateway_project.servers import worker_command
from routing.runtime.usage.spool import pid_alive

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
_PID_FILE = re.compile(r"_(\d+)\.db$")
BACKOFF_START_S = 0.5
BACKOFF_MAX_S = 30.0
STOP_GRACE_S = 15.0


def metrics_dir() -> Path:
    """A fresh directory for the workers' metric files, named in the environment they inherit."""
    path = Path(tempfile.mkdtemp(prefix="switchboard-metrics-"))
    os.environ[MULTIPROC_ENV] = str(path)
    return path


def mark_dead_workers(path: Path, known_dead: set[int], extra_dead: tuple[int, ...] = ()) -> None:
    """Drop the live-gauge files of workers that exited (their counters keep counting in the sum)."""
    from prometheus_client import multiprocess

    pids = {int(m.group(1)) for f in os.listdir(path) if (m := _PID_FILE.search(f))}
    for pid in sorted((pids - known_dead) | set(extra_dead)):
        if pid in extra_dead or not pid_alive(pid):
            multiprocess.mark_process_dead(pid, str(path))
            known_dead.add(pid)


class _Stop:
    """SIGTERM / SIGINT received: stop the workers and exit."""

    def __init__(self) -> None:
        self.signum: int | None = None
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        self.signum = signum


def _stop_all(children: list[subprocess.Popen], signum: int) -> None:
    for child in children:
        if child.poll() is None:
            child.send_signal(signum)
    deadline = time.monotonic() + STOP_GRACE_S
    for child in children:
        try:
            child.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def supervise_uvicorn(host: str, port: int, workers: int, log: Callable[[str], None]) -> int:
    """uvicorn's own N workers, with the shared metrics directory kept clean."""
    path = metrics_dir()
    stop = _Stop()
    dead: set[int] = set()
    child = subprocess.Popen(worker_command("uvicorn", host, port, workers))
    try:
        while child.poll() is None:
            if stop.signum is not None:
                _stop_all([child], signal.SIGTERM)
                break
            mark_dead_workers(path, dead)
            time.sleep(0.5)
        return child.wait()
    finally:
        if child.poll() is None:
            _stop_all([child], signal.SIGTERM)
        shutil.rmtree(path, ignore_errors=True)


def bind(host: str, port: int) -> socket.socket:
    """The listening socket every daphne worker accepts on (inherited by fd)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(edge.LISTEN_BACKLOG)
    sock.set_inheritable(True)
    return sock


def supervise_daphne(host: str, port: int, workers: int, log: Callable[[str], None]) -> int:
    """N daphne processes on one pre-bound socket; a child that dies is restarted with a backoff."""
    path = metrics_dir()
    sock = bind(host, port)
    fd = sock.fileno()
    argv = worker_command("daphne", host, port, workers, fd=fd)
    stop = _Stop()
    dead: set[int] = set()

    def spawn() -> subprocess.Popen:
        return subprocess.Popen(argv, pass_fds=(fd,))

    children = [spawn() for _ in range(workers)]
    started = [time.monotonic()] * workers
    backoff = [BACKOFF_START_S] * workers
    restart_at: list[float | None] = [None] * workers
    try:
        while stop.signum is None:
            now = time.monotonic()
            for i, child in enumerate(children):
                code = child.poll()
                if code is None:
                    continue
                if restart_at[i] is None:
                    mark_dead_workers(path, dead, (child.pid,))
                    if now - started[i] > BACKOFF_MAX_S:
                        backoff[i] = BACKOFF_START_S  # it had been serving: restart soon
                    restart_at[i] = now + backoff[i]
                    log(f"worker {child.pid} exited with {code}; restarting in {backoff[i]:.1f}s")
                    backoff[i] = min(backoff[i] * 2, BACKOFF_MAX_S)
                elif now >= restart_at[i]:
                    children[i] = spawn()
                    started[i] = now
                    restart_at[i] = None
            time.sleep(0.1)
        _stop_all(children, stop.signum)
        return 0
    finally:
        _stop_all(children, signal.SIGTERM)
        sock.close()
        shutil.rmtree(path, ignore_errors=True)
