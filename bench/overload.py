"""`python -m bench.overload`: overload without collapse (docs/overload.md#benchmark).

A mock deployment with a hard capacity C (a request beyond C concurrent gets 429; each call
takes SERVICE_MS), a real gateway (uvicorn, SQLite, no Redis) and three orgs of equal
weight, each with interactive and batch clients. Offered load 2x and 5x C (closed-loop
clients, each sending again when answered; a shed or refused client waits its Retry-After,
capped at 0.5 s) for a bounded time each, with overload control off (pass-through) and on.
Reported: interactive success rate, goodput against what the mock serves a second with C
direct clients (measured first, same run; also against C / SERVICE_MS), the orgs' served shares (Jain's
index), p99 of admitted requests against the unloaded p99, the latency of shed answers and
the share of upstream calls that met a 429. With control on, a brown-out: 2x C while the
capacity halves for 10 s, then recovers; how fast the limit follows each way. Then hedging: a model on two deployments whose
answers take 50 ms, 2 % of them 2 s; p50/p99 and the extra upstream calls, off and on.
With --redis, two gateway processes on that Redis with `max` = C: 2x C all on one of them,
then spread over both (the cluster's max shared by demand, docs/overload.md#two-processes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

from bench import summary
from bench.procs import Proc, free_port, manage, prepare_database, start_gateway, start_mock, wait_http

SERVICE_MS = 100
ORGS = ("org-a", "org-b", "org-c")
BATCH_MAX_WAIT_S = 1.0


def _config(url: str, capacity: int, on: bool) -> str:
    """The gateway's document; with `on`, overload control as an operator configures it
    (docs/overload.md#configuration): the limit on `ov`, hedging on `hx`, two classes per org."""
    limit = (
        f"\n    concurrency: {{initial: {capacity // 2}, max: {capacity * 4}, queue: {capacity * 10}}}" if on else ""
    )
    hedge = "\n    hedge: {budget_pct: 5}" if on else ""
    inter = "\n        priority: interactive" if on else ""
    batch = "\n        priority: batch" if on else ""
    orgs = "".join(
        f"  - name: {o}\n    agents:\n      - name: inter{inter}\n      - name: batch{batch}\n" for o in ORGS
    )
    return f"""
resilience:
  max_retries: 1
  backoff_base_ms: 50
providers:
  - name: mock
    dialect: openai
    base_url: {url}/v1
  - name: mock-2
    dialect: openai
    base_url: {url}/v1
models:
  - id: ov
    provider: mock
    upstream_model: ov
    capabilities: [chat]{limit}
  - id: hx
    capabilities: [chat]
    deployments:
      - {{provider: mock, upstream_model: hx-1}}
      - {{provider: mock-2, upstream_model: hx-2}}{hedge}
orgs:
{orgs}"""


def _import(work: Path, env: dict[str, str], text: str) -> None:
    path = work / "ov-mode.yaml"
    path.write_text(text)
    manage(["import_config", str(path)], env)


def _pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def _round(x: float | None) -> float | None:
    return round(x, 3) if x is not None else None


def jain(xs: list[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one takes everything."""
    total = sum(xs)
    return total * total / (len(xs) * sum(x * x for x in xs)) if total else 0.0


async def _client(
    session: aiohttp.ClientSession, url: str, key: str, org: str, cls: str, until: float, out: list[tuple]
) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    if cls == "batch":
        headers["X-Switchboard-Max-Wait"] = str(BATCH_MAX_WAIT_S)
    body = {"model": "ov", "messages": [{"role": "user", "content": "hi"}]}
    while time.monotonic() < until:
        started = time.monotonic()
        try:
            async with session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as r:
                data = await r.read()
                status, retry = r.status, r.headers.get("Retry-After")
        except (TimeoutError, aiohttp.ClientError):
            status, data, retry = 0, b"", None
        took = time.monotonic() - started
        code = ""
        if status != 200:
            try:
                code = json.loads(data)["error"]["code"]
            except (ValueError, KeyError, TypeError):
                code = str(status)
        out.append((org, cls, status, code, took, started))
        if status != 200:
            await asyncio.sleep(min(float(retry or 0.5), 0.5))


async def _load(
    url: str | list[str], keys: dict[tuple[str, str], str], clients: dict[str, int], seconds: float
) -> list[tuple]:
    """Closed-loop clients for `seconds`; with several gateway URLs, the clients spread over them in turn."""
    out: list[tuple] = []
    until = time.monotonic() + seconds
    urls = [url] if isinstance(url, str) else url
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=60)) as session:
        tasks = [
            _client(session, urls[i % len(urls)], keys[(org, cls)], org, cls, until, out)
            for i, (org, cls) in enumerate((org, cls) for org in ORGS for cls, n in clients.items() for _ in range(n))
        ]
        await asyncio.gather(*tasks)
    return out


async def _direct_capacity(mock_url: str, capacity: int, seconds: float) -> float:
    """What the mock itself serves a second with exactly `capacity` closed-loop clients on it
    (none refused): the goodput's denominator. A call takes a little over SERVICE_MS (the
    timer's overshoot, the answer's own time), so C / 100 ms is not what the upstream can do."""
    served = 0
    until = time.monotonic() + seconds
    body = {"model": "ov", "messages": [{"role": "user", "content": "hi"}]}

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal served
        while time.monotonic() < until:
            async with session.post(f"{mock_url}/v1/chat/completions", json=body) as r:
                await r.read()
                if r.status != 200:
                    raise RuntimeError(f"the mock refused a call within its capacity ({r.status}): the run is void")
            served += 1

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(client(session) for _ in range(capacity)))
    return served / seconds


def _figures(
    rows: list[tuple], capacity: int, seconds: float, unloaded_p99: float | None, capacity_rps: float | None = None
) -> dict[str, Any]:
    """One step's figures; goodput against `capacity_rps` (measured directly, same run), else C / SERVICE_MS."""
    nominal = capacity / (SERVICE_MS / 1000)
    ok = [r for r in rows if r[2] == 200]
    inter = [r for r in rows if r[1] == "interactive"]
    shed = [r for r in rows if r[3] == "overloaded"]
    served = Counter(r[0] for r in ok)
    p99 = _pct([r[4] for r in ok], 0.99)
    return {
        "requests": len(rows),
        "codes": dict(Counter(r[3] or "ok" for r in rows)),
        "interactive_success": round(sum(1 for r in inter if r[2] == 200) / len(inter), 5) if inter else None,
        "goodput_vs_c": round(len(ok) / seconds / (capacity_rps or nominal), 3),
        "goodput_vs_nominal": round(len(ok) / seconds / nominal, 3),
        "served_by_org": {o: served.get(o, 0) for o in ORGS},
        "jain": round(jain([served.get(o, 0) for o in ORGS]), 4),
        "p99_admitted_s": round(p99, 3) if p99 is not None else None,
        "p99_interactive_s": _round(_pct([r[4] for r in ok if r[1] == "interactive"], 0.99)),
        "p99_batch_s": _round(_pct([r[4] for r in ok if r[1] == "batch"], 0.99)),
        "p99_vs_unloaded": round(p99 / unloaded_p99, 2) if p99 and unloaded_p99 else None,
        "shed_p50_ms": round(1000 * _pct([r[4] for r in shed], 0.5), 1) if shed else None,
        "shed_p99_ms": round(1000 * _pct([r[4] for r in shed], 0.99), 1) if shed else None,
        "shed_at_once_share": round(sum(1 for r in shed if r[4] < 0.05) / len(shed), 3) if shed else None,
    }


def _step(
    url: str | list[str],
    keys: dict[tuple[str, str], str],
    mock_url: str,
    capacity: int,
    factor: int,
    seconds: float,
    unloaded_p99: float | None,
    capacity_rps: float,
) -> dict[str, Any]:
    """One load step at `factor` x C (interactive about half of C, spread over the orgs; batch the rest):
    its figures, with the upstream calls it caused and the share of them that met a 429."""
    inter = max(1, capacity // 6)
    batch = max(1, (factor * capacity) // 3 - inter)
    before = _mock_calls(mock_url)
    rows = asyncio.run(_load(url, keys, {"interactive": inter, "batch": batch}, seconds))
    after = _mock_calls(mock_url)
    fig = _figures(rows, capacity, seconds, unloaded_p99, capacity_rps)
    calls = after["count"] - before["count"]
    fig["upstream_calls"] = calls
    fig["upstream_429_share"] = round((after["over_capacity"] - before["over_capacity"]) / calls, 4) if calls else None
    fig["unloaded_p99_s"] = _round(unloaded_p99)
    return fig


def _keys(env: dict[str, str], first: str) -> dict[tuple[str, str], str]:
    keys = {("org-a", "interactive"): first}
    for org in ORGS:
        for cls, agent in (("interactive", "inter"), ("batch", "batch")):
            if (org, cls) not in keys:
                out = manage(["create_api_key", "--org", org, "--agent", agent], env)
                keys[(org, cls)] = out.strip().splitlines()[-1].strip()
    return keys


def _mock_calls(url: str, model: str = "ov") -> dict[str, Any]:
    import urllib.request

    with urllib.request.urlopen(f"{url}/_control/calls?model={model}", timeout=10) as r:  # noqa: S310 - loopback
        return json.loads(r.read())


def _script(url: str, capacity: int) -> None:
    import urllib.request

    spec = {"model": "ov", "steps": [], "then": {"delay_ms": SERVICE_MS}, "capacity": capacity}
    req = urllib.request.Request(f"{url}/_control/script", data=json.dumps(spec).encode(), method="POST")
    urllib.request.urlopen(req, timeout=10).read()  # noqa: S310 - loopback


HEDGE_REQUESTS = 2000
HEDGE_SLOW = (0.02, 2000, 50)  # 2 % of calls take 2 s; the others 50 ms


def _script_tail(url: str, seed: int) -> None:
    """Heavy-tailed answer times on both deployments of `hx`, the same pattern for off and on."""
    import random
    import urllib.request

    rng = random.Random(seed)
    share, slow_ms, fast_ms = HEDGE_SLOW
    for model in ("hx-1", "hx-2"):
        steps = [{"delay_ms": slow_ms if rng.random() < share else fast_ms} for _ in range(3 * HEDGE_REQUESTS)]
        spec = {"model": model, "steps": steps, "then": {"delay_ms": fast_ms}}
        req = urllib.request.Request(f"{url}/_control/script", data=json.dumps(spec).encode(), method="POST")
        urllib.request.urlopen(req, timeout=30).read()  # noqa: S310 - loopback


async def _hedge_load(url: str, key: str) -> list[float]:
    """HEDGE_REQUESTS answers of `hx` from 10 concurrent clients: their latencies."""
    body = {"model": "hx", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": f"Bearer {key}"}
    times: list[float] = []
    left = HEDGE_REQUESTS

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            started = time.monotonic()
            async with session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as r:
                await r.read()
            times.append(time.monotonic() - started)

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        await asyncio.gather(*(client(session) for _ in range(10)))
    return times


def _hedge_step(url: str, mock_url: str, key: str) -> dict[str, Any]:
    _script_tail(mock_url, seed=7)
    before = sum(_mock_calls(mock_url, m)["count"] for m in ("hx-1", "hx-2"))
    times = asyncio.run(_hedge_load(url, key))
    calls = sum(_mock_calls(mock_url, m)["count"] for m in ("hx-1", "hx-2")) - before
    return {
        "requests": len(times),
        "p50_s": _round(_pct(times, 0.5)),
        "p99_s": _round(_pct(times, 0.99)),
        "extra_calls_pct": round(100 * (calls - len(times)) / len(times), 2),
    }


BROWNOUT = (4.0, 10.0, 6.0)  # seconds at C, at C / 2, at C again


async def _limit_of(session: aiohttp.ClientSession, url: str) -> float | None:
    async with session.get(f"{url}/metrics") as r:
        text = await r.text()
    for line in text.splitlines():
        if line.startswith('switchboard_concurrency_limit{model="ov"}'):
            return float(line.rsplit(" ", 1)[1])
    return None


async def _brownout(url: str, mock_url: str, keys: dict[tuple[str, str], str], capacity: int) -> dict[str, Any]:
    """2x C offered while the mock's capacity halves for a while, then recovers; the limit, sampled."""
    before, low, after = BROWNOUT
    samples: list[tuple[float, float]] = []
    start = time.monotonic()

    async def watch() -> None:
        async with aiohttp.ClientSession() as session:
            while time.monotonic() - start < before + low + after:
                value = await _limit_of(session, url)
                if value is not None:
                    samples.append((time.monotonic() - start, value))
                await asyncio.sleep(0.1)

    refused: list[int] = [_mock_calls(mock_url)["over_capacity"]]  # upstream 429s at each phase's start

    async def brown() -> None:
        await asyncio.sleep(before)
        refused.append((await asyncio.to_thread(_mock_calls, mock_url))["over_capacity"])
        await asyncio.to_thread(_script, mock_url, capacity // 2)
        await asyncio.sleep(low)
        refused.append((await asyncio.to_thread(_mock_calls, mock_url))["over_capacity"])
        await asyncio.to_thread(_script, mock_url, capacity)

    inter = max(1, capacity // 6)
    load = _load(url, keys, {"interactive": inter, "batch": max(1, (2 * capacity) // 3 - inter)}, before + low + after)
    rows, _, _ = await asyncio.gather(load, watch(), brown())

    def first(after_s: float, ok: Any) -> float | None:
        hit = next((t for t, v in samples if t >= after_s and ok(v)), None)
        return round(hit - after_s, 2) if hit is not None else None

    inter_rows = [r for r in rows if r[1] == "interactive"]
    shed = {k: v for k, v in _figures(rows, capacity, before + low + after, None).items() if k.startswith("shed_")}
    return {
        **shed,
        "down_s": first(before, lambda v: v <= capacity // 2 * 1.1),  # within 10 % of the new capacity
        "up_s": first(before + low, lambda v: v >= capacity * 0.9),
        "limit_samples": [(round(t, 1), v) for t, v in samples],
        "interactive_success": round(sum(1 for r in inter_rows if r[2] == 200) / len(inter_rows), 5),
        "requests": len(rows),
        "codes": dict(Counter(r[3] or "ok" for r in rows)),
        "shed_ms_by_phase": _shed_by_phase(rows, start, (before, before + low)),
        "upstream_429s_by_phase": [
            b - a for a, b in zip(refused, [*refused[1:], _mock_calls(mock_url)["over_capacity"]], strict=True)
        ],
    }


def _shed_by_phase(rows: list[tuple], start: float, edges: tuple[float, float]) -> dict[str, Any]:
    """The shed answers' latency (p50, p99, share within 50 ms) in each phase: at C, at C / 2, at C again,
    and within 0.5 s of a change (where waiters are pushed back by the change itself)."""
    phases: dict[str, list[float]] = {"steady": [], "within_0.5_s_of_a_change": []}
    for r in rows:
        if r[3] == "overloaded":
            t = r[5] - start
            near = any(0 <= t - edge < 0.5 or 0 <= edge - t < r[4] for edge in edges)
            phases["within_0.5_s_of_a_change" if near else "steady"].append(r[4])
    out = {}
    for name, took in phases.items():
        if took:
            out[name] = {
                "count": len(took),
                "p50": round(1000 * (_pct(took, 0.5) or 0), 1),
                "p99": round(1000 * (_pct(took, 0.99) or 0), 1),
                "within_50_ms": round(sum(1 for x in took if x < 0.05) / len(took), 3),
            }
    return out


def _cluster_steps(
    work: Path,
    env: dict[str, str],
    keys: dict[tuple[str, str], str],
    mock_url: str,
    capacity: int,
    seconds: float,
    capacity_rps: float,
    redis_url: str,
) -> dict[str, Any]:
    """Two gateway processes on one Redis, `max` = C (an operator who knows the deployment's capacity):
    2x C offered, all on one process, then spread over both. The cluster's max is shared by demand
    (docs/overload.md#processes); split evenly, one busy process could use at most half of it."""
    _import(work, env, _config(mock_url, capacity, True).replace(f"max: {capacity * 4}", f"max: {capacity}"))
    cluster_env = {**env, "REDIS_URL": redis_url}
    procs = [start_gateway("uvicorn", f"cluster-{n}", work, cluster_env) for n in ("a", "b")]
    urls = [u for _, u in procs]
    out: dict[str, Any] = {}
    try:

        async def counted() -> None:
            async with aiohttp.ClientSession() as session:
                for _ in range(100):  # bounded: 10 s
                    seen = []
                    for u in urls:
                        async with session.get(f"{u}/metrics") as r:
                            text = await r.text()
                        seen.append(any(x.startswith("switchboard_limit_processes 2.0") for x in text.splitlines()))
                    if all(seen):
                        return
                    await asyncio.sleep(0.1)
            raise RuntimeError("the two gateway processes never saw each other through Redis: the run is void")

        for u in urls:  # one request each: the gates exist, the processes are counted
            asyncio.run(_load(u, keys, {"interactive": 1}, 0.2))
        asyncio.run(counted())
        for name, targets in (("all-on-one", urls[:1]), ("spread", urls)):
            fig = _step(targets, keys, mock_url, capacity, 2, seconds, None, capacity_rps)
            out[f"cluster-{name}-2x"] = fig
            print(f"cluster {name} 2x C: {json.dumps(fig)}", flush=True)
    finally:
        for proc, _ in procs:
            proc.stop()
    return out


LITELLM_VENV = Path("/tmp/switchboard-peers/litellm-1.108.7")  # where bench/peers/peers.sh installs it
LITELLM_KEY = "sk-switchboard-bench"


def _start_litellm(work: Path, mock_url: str, venv: Path) -> tuple[Proc, str]:
    """LiteLLM's proxy (installed by bench/peers/peers.sh) in front of the same mock, one worker."""
    config = work / "litellm.yaml"
    config.write_text(
        "model_list:\n  - model_name: ov\n    litellm_params:\n      model: openai/ov\n"
        f"      api_base: {mock_url}/v1\n      api_key: sk-mock\n"
        "litellm_settings:\n  telemetry: false\n  set_verbose: false\n  drop_params: true\n"
        f"general_settings:\n  master_key: {LITELLM_KEY}\n"
    )
    port = free_port()
    argv = ["env", "-u", "DATABASE_URL", "-u", "REDIS_URL", str(venv / "bin" / "litellm"), "--config", str(config)]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"]
    env = {"LITELLM_LOG": "ERROR", "LITELLM_TELEMETRY": "False", "DISABLE_SCHEMA_UPDATE": "True"}
    proc = Proc("litellm", argv, work, env)
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/health/liveliness", proc, timeout=180)
    return proc, url


def _litellm_steps(
    work: Path,
    mock_url: str,
    venv: Path,
    capacity: int,
    seconds: float,
    factors: tuple[int, ...],
    capacity_rps: float | None = None,
) -> dict[str, Any]:
    """The same offered loads through LiteLLM (one key for every client: it has no priority classes)."""
    out: dict[str, Any] = {}
    proc, url = _start_litellm(work, mock_url, venv)
    try:
        keys = {(org, cls): LITELLM_KEY for org in ORGS for cls in ("interactive", "batch")}
        quiet = asyncio.run(_load(url, keys, {"interactive": 1, "batch": 1}, 2.0))
        unloaded = _pct([r[4] for r in quiet if r[2] == 200], 0.99)
        for factor in factors:
            fig = _step(url, keys, mock_url, capacity, factor, seconds, unloaded, capacity_rps)
            out[f"litellm-{factor}x"] = fig
            print(f"litellm {factor}x C: {json.dumps(fig)}", flush=True)
    finally:
        proc.stop()
    return out


def run(
    capacity: int,
    seconds: float,
    factors: tuple[int, ...],
    hedge: bool = True,
    modes: tuple[str, ...] = ("off", "on"),
    litellm: Path | None = LITELLM_VENV,
    redis_url: str | None = None,
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="switchboard-overload-"))
    mock, mock_url = start_mock(work)
    results: dict[str, Any] = {"capacity": capacity, "service_ms": SERVICE_MS, "seconds": seconds, "runs": {}}
    try:
        _script(mock_url, capacity)
        capacity_rps = asyncio.run(_direct_capacity(mock_url, capacity, 5.0))
        results["capacity_rps"] = round(capacity_rps, 1)
        print(f"the mock with {capacity} direct clients: {capacity_rps:.1f} calls a second", flush=True)
        env, key = prepare_database(work, "ov", _config(mock_url, capacity, False), "org-a", "inter")
        keys = _keys(env, key)
        for mode in modes:
            _import(work, env, _config(mock_url, capacity, mode == "on"))
            gw, url = start_gateway("uvicorn", f"gateway-{mode}", work, env)
            try:
                quiet = asyncio.run(_load(url, keys, {"interactive": 1, "batch": 1}, 2.0))  # 6 clients: unloaded
                unloaded = _pct([r[4] for r in quiet if r[2] == 200], 0.99)
                for factor in factors:
                    fig = _step(url, keys, mock_url, capacity, factor, seconds, unloaded, capacity_rps)
                    results["runs"][f"{mode}-{factor}x"] = fig
                    print(f"{mode:>3} {factor}x C: {json.dumps(fig)}", flush=True)
                if mode == "on":
                    before = _mock_calls(mock_url)
                    fig = asyncio.run(_brownout(url, mock_url, keys, capacity))
                    after = _mock_calls(mock_url)
                    calls = after["count"] - before["count"]
                    fig["upstream_429_share"] = round((after["over_capacity"] - before["over_capacity"]) / calls, 4)
                    results["runs"]["on-brownout"] = fig
                    shown = {k: v for k, v in fig.items() if k != "limit_samples"}
                    print(f" on brown-out: {json.dumps(shown)}", flush=True)
                if hedge:
                    fig = _hedge_step(url, mock_url, key)
                    results["runs"][f"{mode}-hedge"] = fig
                    print(f"{mode:>3} hedging: {json.dumps(fig)}", flush=True)
            finally:
                gw.stop()
        if redis_url and "on" in modes:
            results["runs"].update(
                _cluster_steps(work, env, keys, mock_url, capacity, seconds, capacity_rps, redis_url)
            )
        elif "on" in modes:
            print("the two-process steps left out: no --redis (a Redis the gateways may use)", flush=True)
        if litellm is not None:
            if (litellm / "bin" / "litellm").exists():
                results["runs"].update(
                    _litellm_steps(work, mock_url, litellm, capacity, seconds, factors, capacity_rps)
                )
            else:
                print(f"LiteLLM left out: no {litellm}/bin/litellm (bench/peers/peers.sh installs it)", flush=True)
    finally:
        mock.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--capacity", type=int, default=20, help="the mock's hard capacity C")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each load step")
    parser.add_argument("--no-hedge", action="store_true", help="skip the hedging step")
    parser.add_argument("--factors", default="2,5", help="offered loads, as multiples of C (comma-separated)")
    parser.add_argument("--modes", default="off,on", help="overload control off, on, or both")
    parser.add_argument("--litellm", type=Path, default=LITELLM_VENV, help="LiteLLM's virtualenv (from bench/peers)")
    parser.add_argument("--no-litellm", action="store_true", help="skip the LiteLLM side-by-side")
    parser.add_argument(
        "--redis",
        default=os.environ.get("SWITCHBOARD_BENCH_REDIS_URL", ""),
        help="a Redis for the two-process steps (default $SWITCHBOARD_BENCH_REDIS_URL; none: the steps are left out)",
    )
    args = parser.parse_args()
    factors = tuple(int(f) for f in args.factors.split(",") if f)
    modes = tuple(m for m in args.modes.split(",") if m)
    litellm = None if args.no_litellm else args.litellm
    results = run(
        args.capacity,
        args.seconds,
        factors,
        hedge=not args.no_hedge,
        modes=modes,
        litellm=litellm,
        redis_url=args.redis,
    )
    summary.save("overload", results)


if __name__ == "__main__":
    main()
