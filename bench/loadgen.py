"""The benchmark's own load generator: one asyncio + aiohttp process, per-request timing.

Run as `python -m bench.loadgen '<json spec>'`; it prints JSON lines on stdout, the
last one is the result. It runs in its own process so the client's CPU time is not
the gateway's, and it times each request itself (perf_counter around request and
body), which wrk cannot do for time to first byte or interleaved batches.

Modes (spec["mode"]):
  latency  one client, keep-alive connection per target, batches of `batch` requests
           alternating between targets for `rounds` rounds (order reversed every other
           round), so drift in machine load hits every target alike. With
           "stream": true it records time to first body byte and to last byte.
  count    `total` requests at `concurrency` (statuses, latencies, elapsed).
  storm    `total` requests all at once, each on its own connection, client timeout
           `timeout_s`: status (or error name) and latency of every request.
  probe    GET `url` one at a time every `interval_s` until a line (or EOF) arrives on
           stdin or `max_s` passes: statuses and latencies.
  hold     open `streams` streaming requests, wait for each one's first byte, print
           {"ready": n, "failed": k}, keep draining them until a line arrives on stdin
           (or `max_hold_s`), then hang up on all of them.
Every loop is bounded by a count and by `max_s`.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import time
from collections import Counter
from typing import Any

import aiohttp
import orjson

_perf = time.perf_counter


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS).decode() + "\n")
    sys.stdout.flush()


def _session(limit: int, timeout_s: float) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=limit, limit_per_host=0, keepalive_timeout=60),
        timeout=aiohttp.ClientTimeout(total=timeout_s),
        skip_auto_headers=("User-Agent",),
    )


class Target:
    """A URL, headers and a pre-encoded body: nothing is built per request."""

    __slots__ = ("name", "url", "headers", "body", "method", "_parts", "_n")

    def __init__(self, spec: dict[str, Any]) -> None:
        self.name: str = spec.get("name", "target")
        self.url: str = spec["url"]
        self.headers: dict[str, str] = {"Content-Type": "application/json", **spec.get("headers", {})}
        body = spec.get("body")
        self.body: bytes | None = None if body is None else (body if isinstance(body, bytes) else str(body).encode())
        self.method: str = spec.get("method", "POST" if body is not None else "GET")
        # "vary": the body's marker becomes a counter, a different body (cache key) each request
        marker = spec.get("vary")
        self._parts = self.body.split(marker.encode(), 1) if marker and self.body else None
        self._n = int.from_bytes(os.urandom(5)) << 24  # unique across runs: no hit on an earlier run's key

    def data(self) -> bytes | None:
        """The next request's body: the same bytes, or with "vary" the next counter's."""
        if self._parts is None:
            return self.body
        self._n += 1
        return b"%s%d%s" % (self._parts[0], self._n, self._parts[1])


async def _one(session: aiohttp.ClientSession, t: Target) -> tuple[int, float]:
    data = t.data()
    t0 = _perf()
    async with session.request(t.method, t.url, data=data, headers=t.headers) as resp:
        await resp.read()
        return resp.status, (_perf() - t0) * 1000


async def _one_stream(session: aiohttp.ClientSession, t: Target) -> tuple[int, float, float]:
    data = t.data()
    t0 = _perf()
    async with session.request(t.method, t.url, data=data, headers=t.headers) as resp:
        first = await resp.content.readany()
        t1 = _perf()
        if first:
            for _ in range(100_000):  # bounded drain
                if not await resp.content.readany():
                    break
        return resp.status, (t1 - t0) * 1000, (_perf() - t0) * 1000


async def _again_if_closed(fn: Any, session: aiohttp.ClientSession, t: Target, closed: Counter[str]) -> Any:
    """One request; if the server had closed the idle keep-alive connection while this target
    waited its turn (uvicorn and node close them after 5 s), one more on a fresh connection:
    a connection closed before the request is not a measurement (counted in "reconnects")."""
    try:
        return await fn(session, t)
    except aiohttp.ServerDisconnectedError:
        closed[t.name] += 1
        return await fn(session, t)


async def run_latency(spec: dict[str, Any]) -> dict[str, Any]:
    targets = [Target(t) for t in spec["targets"]]
    rounds, warmup = int(spec["rounds"]), int(spec.get("warmup", 50))
    batches = {t["name"]: int(t.get("batch", spec["batch"])) for t in spec["targets"]}
    stream = bool(spec.get("stream"))
    max_s = float(spec.get("max_s", 120))
    sessions = {t.name: _session(1, float(spec.get("timeout_s", 30))) for t in targets}
    samples: dict[str, Any] = {t.name: ({"ttfb": [], "ttlb": []} if stream else []) for t in targets}
    statuses: dict[str, Counter[int]] = {t.name: Counter() for t in targets}
    closed: Counter[str] = Counter()
    one = _one_stream if stream else _one
    started = _perf()
    try:
        for t in targets:
            for _ in range(warmup):
                await _again_if_closed(one, sessions[t.name], t, closed)
        done_rounds = 0
        for r in range(rounds):
            if _perf() - started > max_s:
                break
            order = targets if r % 2 == 0 else list(reversed(targets))
            for t in order:
                session, out, seen = sessions[t.name], samples[t.name], statuses[t.name]
                gc.collect()
                gc.disable()
                try:
                    for _ in range(batches[t.name]):
                        if stream:
                            status, ttfb, ttlb = await _again_if_closed(one, session, t, closed)
                            out["ttfb"].append(ttfb)
                            out["ttlb"].append(ttlb)
                        else:
                            status, ms = await _again_if_closed(one, session, t, closed)
                            out.append(ms)
                        seen[status] += 1
                finally:
                    gc.enable()
            done_rounds += 1
    finally:
        for s in sessions.values():
            await s.close()
    return {
        "mode": "latency",
        "rounds": done_rounds,
        "samples": samples,
        "statuses": {name: dict(c) for name, c in statuses.items()},
        "reconnects": dict(closed),
        "elapsed_s": _perf() - started,
    }


async def run_count(spec: dict[str, Any]) -> dict[str, Any]:
    t = Target(spec["target"])
    total, concurrency = int(spec["total"]), int(spec["concurrency"])
    max_s = float(spec.get("max_s", 120))
    statuses: Counter[Any] = Counter()
    latencies: list[float] = []
    remaining = [total]
    started = _perf()
    async with _session(concurrency, float(spec.get("timeout_s", 30))) as session:

        async def worker() -> None:
            while remaining[0] > 0 and _perf() - started < max_s:
                remaining[0] -= 1
                try:
                    status, ms = await _one(session, t)
                except (aiohttp.ClientError, TimeoutError) as exc:
                    statuses[type(exc).__name__] += 1
                    continue
                statuses[status] += 1
                latencies.append(ms)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = _perf() - started
    return {
        "mode": "count",
        "statuses": dict(statuses),
        "latencies_ms": latencies,
        "elapsed_s": elapsed,
        "done": len(latencies),
    }


async def run_storm(spec: dict[str, Any]) -> dict[str, Any]:
    t = Target(spec["target"])
    total, timeout_s = int(spec["total"]), float(spec["timeout_s"])
    results: list[tuple[Any, float]] = []
    async with _session(0, timeout_s) as session:

        async def one() -> None:
            t0 = _perf()
            try:
                status, _ = await _one(session, t)
                results.append((status, (_perf() - t0) * 1000))
            except (aiohttp.ClientError, TimeoutError) as exc:
                results.append((type(exc).__name__, (_perf() - t0) * 1000))

        started = _perf()
        await asyncio.gather(*(one() for _ in range(total)))
        elapsed = _perf() - started
    return {
        "mode": "storm",
        "statuses": dict(Counter(str(s) for s, _ in results)),
        "latencies_ms": [ms for _, ms in results],
        "elapsed_s": elapsed,
    }


async def _stdin_line() -> None:
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


async def run_probe(spec: dict[str, Any]) -> dict[str, Any]:
    t = Target(spec["target"])
    interval, max_s = float(spec.get("interval_s", 0.01)), float(spec.get("max_s", 60))
    statuses: Counter[Any] = Counter()
    latencies: list[float] = []
    stop = asyncio.ensure_future(_stdin_line())
    started = _perf()
    async with _session(1, float(spec.get("timeout_s", 10))) as session:
        _emit({"probing": True})
        for _ in range(int(max_s / max(interval, 0.001)) + 1):
            if stop.done() or _perf() - started > max_s:
                break
            try:
                status, ms = await _one(session, t)
                statuses[status] += 1
                latencies.append(ms)
            except (aiohttp.ClientError, TimeoutError) as exc:
                statuses[type(exc).__name__] += 1
            await asyncio.sleep(interval)
    stop.cancel()
    return {"mode": "probe", "statuses": dict(statuses), "latencies_ms": latencies, "elapsed_s": _perf() - started}


async def run_hold(spec: dict[str, Any]) -> dict[str, Any]:
    t = Target(spec["target"])
    n = int(spec["streams"])
    max_hold_s = float(spec.get("max_hold_s", 30))
    ready = asyncio.Semaphore(0)
    outcome: Counter[Any] = Counter()
    frames = [0]

    async def hold(session: aiohttp.ClientSession) -> None:
        try:
            async with session.request(t.method, t.url, data=t.body, headers=t.headers) as resp:
                first = await resp.content.readany()
                outcome[resp.status if first else "empty"] += 1
                ready.release()
                for _ in range(1_000_000):  # drained until cancelled
                    if not await resp.content.readany():
                        break
                    frames[0] += 1
        except (aiohttp.ClientError, TimeoutError) as exc:
            outcome[type(exc).__name__] += 1
            ready.release()

    started = _perf()
    async with _session(0, max_hold_s + 30) as session:
        tasks = [asyncio.ensure_future(hold(session)) for _ in range(n)]
        try:
            async with asyncio.timeout(max_hold_s):
                for _ in range(n):
                    await ready.acquire()
        except TimeoutError:
            pass
        opened = outcome.get(200, 0)
        _emit({"ready": opened, "outcome": {str(k): v for k, v in outcome.items()}, "open_s": _perf() - started})
        try:
            async with asyncio.timeout(max_hold_s):
                await _stdin_line()
        except TimeoutError:
            pass
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {"mode": "hold", "opened": opened, "outcome": {str(k): v for k, v in outcome.items()}, "frames": frames[0]}


MODES = {"latency": run_latency, "count": run_count, "storm": run_storm, "probe": run_probe, "hold": run_hold}


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        raise SystemExit("usage: python -m bench.loadgen '<json spec>' (see the module docstring for the modes)")
    spec = orjson.loads(args[0])
    mode = spec.get("mode")
    if mode not in MODES:
        raise SystemExit(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    _emit(asyncio.run(MODES[mode](spec)))


if __name__ == "__main__":
    main()
