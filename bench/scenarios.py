"""The benchmark scenarios. Each takes the run's Bench and returns a JSON-able dict.

Every number that compares the gateway with the mock comes from the same invocation
(interleaved where it is one client), so the machine's drift cancels out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench import config, procs
from bench.stats import added, percentile, ratio, summarize, within

DEFAULT_MAX_RETRIES = 2  # docs/resilience.md#r3 default; the benchmark config keeps the defaults


@dataclass
class Peer:
    """Another gateway in front of the same mock (LiteLLM, Portkey), measured beside Switchboard.

    `headers` are sent on every request besides the bearer key (Portkey routes by
    `x-portkey-provider` / `x-portkey-custom-host` headers instead of a config file).
    """

    name: str
    url: str
    key: str
    model: str
    headers: dict[str, str] = field(default_factory=dict)
    target: float | None = None  # the c32 throughput ratio Switchboard / peer to meet, if any

    def request_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}", **self.headers}


@dataclass
class Side:
    """One more Switchboard beside the plain one, measured in the same loops: the other server
    (daphne) and the feature-enabled configuration (config.features_document) on each."""

    name: str  # "features", "daphne", "daphne features"
    server: str
    proc: procs.Proc
    url: str
    key: str
    features: bool  # calls config.FEATURES with a varying body (every request a cache miss)
    model: str | None = None  # another model of the features' configuration (config.GOVERNED: no cache)

    def target(self, batch: int | None = None) -> dict[str, Any]:
        model = self.model or (config.FEATURES[0] if self.features else config.CHAT[0])
        t: dict[str, Any] = {
            "name": self.name,
            "url": f"{self.url}/v1/chat/completions",
            "headers": {"Authorization": f"Bearer {self.key}"},
            "body": config.chat_body(model, vary=self.features),
        }
        if self.features:
            t["vary"] = config.VARY
        if batch is not None:
            t["batch"] = batch
        return t


@dataclass
class Bench:
    work: Path
    server: str
    quick: bool
    mock: procs.Proc
    mock_url: str
    gateway: procs.Proc
    gateway_url: str
    key: str
    rss_idle_mb: float
    peers: list[Peer] = field(default_factory=list)
    extra_env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    sides: list[Side] = field(default_factory=list)

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def pick(self, full: int, quick: int) -> int:
        return quick if self.quick else full

    def direct(self, upstream_model: str, stream: bool = False) -> dict[str, Any]:
        return {
            "name": "direct",
            "url": f"{self.mock_url}/v1/chat/completions",
            "body": config.chat_body(upstream_model, stream),
        }

    def through(
        self, model: str, stream: bool = False, url: str | None = None, name: str = "gateway"
    ) -> dict[str, Any]:
        return {
            "name": name,
            "url": f"{url or self.gateway_url}/v1/chat/completions",
            "headers": self.auth(),
            "body": config.chat_body(model, stream),
        }

    def peer_targets(self, batch: int | None = None) -> list[dict[str, Any]]:
        """One load-generator target per peer, named `peer:<name>`."""
        out = []
        for peer in self.peers:
            t: dict[str, Any] = {
                "name": f"peer:{peer.name}",
                "url": f"{peer.url}/v1/chat/completions",
                "headers": peer.request_headers(),
                "body": config.chat_body(peer.model),
            }
            if batch is not None:
                t["batch"] = batch
            out.append(t)
        return out


def _mock_calls(b: Bench, upstream_model: str) -> dict[str, Any]:
    status, body = procs.http("GET", f"{b.mock_url}/_control/calls?model={upstream_model}")
    if status != 200:
        raise RuntimeError(f"mock /_control/calls answered {status}: {body[:200]!r}")
    data = orjson.loads(body)
    data.pop("requests", None)
    return data


def _check_ok(statuses: dict[str, dict[Any, int]], notes: list[str], scenario: str) -> None:
    for name, seen in statuses.items():
        bad = {k: v for k, v in seen.items() if str(k) != "200"}
        if bad:
            notes.append(f"{scenario}: {name} answered non-200 statuses {bad}; its numbers are not comparable")


# --- 1 client latency ---------------------------------------------------------------------


def latency(b: Bench) -> dict[str, Any]:
    # 6 000 requests a target (p99.9 from the 6 slowest), in batches small enough that no target
    # idles 2 s between its batches: a budget's cluster lease is given back after 2 s unused
    # (routing/runtime/cluster/shared_limits.py IDLE_S), which steady traffic from one client never sees.
    rounds, batch = b.pick(60, 15), b.pick(100, 80)
    targets = [b.direct(config.CHAT[1]), b.through(config.CHAT[0])]
    targets.extend(side.target() for side in b.sides)
    peers = b.peer_targets(batch=max(10, batch // 10))  # 600 each: LiteLLM answers in ~20 ms
    targets.extend(peers)
    raw = procs.loadgen(
        {"mode": "latency", "targets": targets, "rounds": rounds, "batch": batch, "warmup": 100, "max_s": 150},
        timeout=240,
    )
    _check_ok(raw["statuses"], b.notes, "latency")
    if raw.get("reconnects"):
        b.notes.append(f"latency: idle keep-alive connections closed by the server, re-sent: {raw['reconnects']}")
    out: dict[str, Any] = {"rounds": raw["rounds"]}
    for t in targets[:2]:
        out[t["name"]] = summarize(raw["samples"][t["name"]])
    out["added"] = added(out["gateway"], out["direct"])
    if b.sides:
        out["sides"] = {}
        for side in b.sides:
            stats = summarize(raw["samples"][side.name])
            out["sides"][side.name] = {**stats, "added": added(stats, out["direct"]), "server": side.server}
    if peers:
        out["peers"] = {}
        for peer, t in zip(b.peers, peers, strict=True):
            stats = summarize(raw["samples"][t["name"]])
            out["peers"][peer.name] = {**stats, "added": added(stats, out["direct"])}
    return out


def stream(b: Bench) -> dict[str, Any]:
    rounds, batch = b.pick(6, 4), b.pick(300, 100)
    targets = [b.direct(config.STREAM[1], stream=True), b.through(config.STREAM[0], stream=True)]
    raw = procs.loadgen(
        {
            "mode": "latency",
            "stream": True,
            "targets": targets,
            "rounds": rounds,
            "batch": batch,
            "warmup": 30,
            "max_s": 60,
        },
        timeout=120,
    )
    _check_ok(raw["statuses"], b.notes, "stream")
    out: dict[str, Any] = {"frames": config.STREAM_FRAMES, "rounds": raw["rounds"]}
    for name in ("direct", "gateway"):
        out[name] = {"ttfb": summarize(raw["samples"][name]["ttfb"]), "ttlb": summarize(raw["samples"][name]["ttlb"])}
    a_first = added(out["gateway"]["ttfb"], out["direct"]["ttfb"])
    a_last = added(out["gateway"]["ttlb"], out["direct"]["ttlb"])
    out["added"] = {
        "ttfb_p50": a_first["p50"],
        "ttfb_p99": a_first["p99"],
        "ttlb_p50": a_last["p50"],
        "ttlb_p99": a_last["p99"],
    }
    return out


# --- throughput ---------------------------------------------------------------------------


def throughput(b: Bench) -> dict[str, Any]:
    """wrk at 1, 32 and 128 connections, direct and through the gateway, alternating.

    Each (level, target) runs `reps` short times, alternating targets, and keeps the best
    run: on a shared machine other tenants only ever slow a run down, so the best of a few
    is the least disturbed estimate of each side's capacity (every run is in the JSON).
    The other sides (daphne, the feature-enabled gateways) run at 32 connections only, and
    only that level (the target's) keeps the best of `reps`; 1 and 128 run once each.
    """
    seconds, reps = b.pick(3, 2), 2
    direct = (f"{b.mock_url}/v1/chat/completions", config.chat_body(config.CHAT[1]), {}, None)
    gateway = (f"{b.gateway_url}/v1/chat/completions", config.chat_body(config.CHAT[0]), b.auth(), None)
    targets = {"direct": direct, "gateway": gateway}
    for peer in b.peers:
        targets[f"peer:{peer.name}"] = (
            f"{peer.url}/v1/chat/completions",
            config.chat_body(peer.model),
            peer.request_headers(),
            None,
        )
    sides = {}
    for side in b.sides:
        t = side.target()
        sides[f"side:{side.name}"] = (t["url"], t["body"], t["headers"], t.get("vary"))
    for url, body, headers, vary in (*targets.values(), *sides.values()):  # warm pools and caches
        procs.wrk(url, body, headers, 8, 1, b.work, vary)
    out: dict[str, Any] = {"seconds": seconds, "reps": reps}
    for conns in (1, 32, 128):
        level_targets = {**targets, **sides} if conns == 32 else targets
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in level_targets}
        for _ in range(reps if conns == 32 else 1):  # the target's level gets the best of `reps`
            for name, (url, body, headers, vary) in level_targets.items():
                runs[name].append(procs.wrk(url, body, headers, conns, seconds, b.work, vary))
        level: dict[str, Any] = {}
        for name, results in runs.items():
            best = max(results, key=lambda r: r["rps"])
            entry = {**best, "runs_rps": [r["rps"] for r in results]}
            kind, _, rest = name.partition(":")
            if kind in ("peer", "side"):
                level.setdefault(f"{kind}s", {})[rest] = entry
            else:
                level[name] = entry
            errors = sum(r["errors"] for r in results)
            if errors:
                b.notes.append(
                    f"throughput c{conns}: {name} had {errors} errors ({sum(r['non_2xx'] for r in results)} non-2xx)"
                )
        level["ratio"] = ratio(level["gateway"]["rps"], level["direct"]["rps"])
        targets_by_name = {p.name: p.target for p in b.peers}
        for name, entry in level.get("peers", {}).items():
            entry["vs_peer"] = ratio(level["gateway"]["rps"], entry["rps"])  # Switchboard / peer
            entry["target"] = targets_by_name.get(name)
        for entry in level.get("sides", {}).values():
            entry["vs_plain"] = ratio(entry["rps"], level["gateway"]["rps"])  # this side / plain uvicorn
        out[f"c{conns}"] = level
    return out


# --- memory -------------------------------------------------------------------------------


def memory(b: Bench) -> dict[str, Any]:
    total = 10_000
    out: dict[str, Any] = {"idle_mb": b.rss_idle_mb}
    raw = procs.loadgen(
        {"mode": "count", "target": b.through(config.CHAT[0]), "total": total, "concurrency": 32, "max_s": 90},
        timeout=150,
    )
    if raw["done"] < total:
        b.notes.append(f"memory: only {raw['done']} of {total} requests completed in the time bound")
    bad = {k: v for k, v in raw["statuses"].items() if str(k) != "200"}
    if bad:
        b.notes.append(f"memory: non-200 answers during the 10 000 requests: {bad}")
    time.sleep(0.5)
    out["requests"] = raw["done"]
    out["after_10k_mb"] = b.gateway.rss_mb()
    streams = 500
    before_streams = b.gateway.rss_mb()
    hold = procs.Interactive(
        {"mode": "hold", "target": b.through(config.SLOW[0], stream=True), "streams": streams, "max_hold_s": 60}
    )
    try:
        ready = hold.read_line()
        time.sleep(0.5)
        out["streams_open"] = ready["ready"]
        out["streams_open_s"] = round(ready["open_s"], 2)
        out["streams_500_mb"] = b.gateway.rss_mb()
        out["per_stream_kb"] = round((out["streams_500_mb"] - before_streams) * 1024 / max(1, ready["ready"]), 1)
        if ready["ready"] < streams:
            b.notes.append(f"memory: only {ready['ready']} of {streams} streams opened: {ready['outcome']}")
        hold.finish(timeout=60)
    finally:
        hold.kill()
    # R7: every upstream stream must be hung up once its client left (bounded wait)
    deadline = time.monotonic() + 5
    calls = _mock_calls(b, config.SLOW[1])
    while calls["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.1)
        calls = _mock_calls(b, config.SLOW[1])
    out["upstream_streams_left_open"] = calls["in_flight"]
    time.sleep(0.5)
    out["after_streams_mb"] = b.gateway.rss_mb()
    return out


# --- configuration size -------------------------------------------------------------------


def config_size(b: Bench) -> dict[str, Any]:
    large_n, large_policies = config.LARGE_MODELS, config.large_policies()
    t0 = time.monotonic()
    env, key = procs.prepare_database(b.work, "large", config.large_yaml(b.mock_url), config.ORG, config.AGENT)
    prepare_s = time.monotonic() - t0
    t0 = time.monotonic()
    proc, url = procs.start_gateway(b.server, "gateway-large", b.work, {**env, **b.extra_env}, timeout=180)
    boot_s = time.monotonic() - t0
    try:
        large_target = b.through(config.CHAT[0], url=url, name="large")
        large_target["headers"] = {"Authorization": f"Bearer {key}"}
        rounds, batch = b.pick(4, 4), b.pick(300, 200)
        targets = [b.direct(config.CHAT[1]), b.through(config.CHAT[0], name="small"), large_target]
        raw = procs.loadgen(
            {"mode": "latency", "targets": targets, "rounds": rounds, "batch": batch, "warmup": 100, "max_s": 60},
            timeout=120,
        )
        _check_ok(raw["statuses"], b.notes, "config")
        summaries = {t["name"]: summarize(raw["samples"][t["name"]]) for t in targets}
        small = added(summaries["small"], summaries["direct"], ("p50", "p99"))
        large = added(summaries["large"], summaries["direct"], ("p50", "p99"))
        return {
            "small": {
                "models": 10,
                "policies": 10,
                "added_p50": small["p50"],
                "added_p99": small["p99"],
                "rss_mb": b.gateway.rss_mb(),
            },
            "large": {
                "models": large_n,
                "policies": large_policies,
                "added_p50": large["p50"],
                "added_p99": large["p99"],
                "rss_mb": proc.rss_mb(),
                "import_s": round(prepare_s, 1),
                "boot_s": round(boot_s, 1),
            },
            "delta_p50": round(large["p50"] - small["p50"], 3),
            "raw": summaries,
        }
    finally:
        proc.stop()


# --- 429 storm ----------------------------------------------------------------------------


STORM_ROUNDS = 6  # consecutive storms: memory must level off after the first


STORM_ROUNDS_OTHER = 2  # on the other server: /health only (memory is the plain one's row)


def _one_storm(
    b: Bench, total: int, deadline_s: float, side: Side | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    url = side.url if side else b.gateway_url
    target = b.through(config.STORM[0], url=url)
    if side:
        target["headers"] = {"Authorization": f"Bearer {side.key}"}
    probe = procs.Interactive({"mode": "probe", "target": {"url": f"{url}/health"}, "interval_s": 0.01, "max_s": 60})
    try:
        probe.read_line()
        raw = procs.loadgen(
            {"mode": "storm", "target": target, "total": total, "timeout_s": deadline_s + 5},
            timeout=deadline_s + 60,
        )
        health = probe.finish(timeout=30)
    finally:
        probe.kill()
    time.sleep(1.0)
    return raw, health


def storm(b: Bench) -> dict[str, Any]:
    """Six consecutive 500-request storms; latencies and /health over all of them, RSS after each."""
    total = 500
    deadline_s = config.STORM_TOTAL_TIMEOUT_MS / 1000
    rss_before = b.gateway.rss_mb()
    calls_before = _mock_calls(b, config.STORM[1])["count"]
    statuses: dict[str, int] = {}
    lat: list[float] = []
    hl: list[float] = []
    health_statuses: dict[str, int] = {}
    rss_after_each = []
    first_calls = None
    elapsed = 0.0
    for _ in range(STORM_ROUNDS):
        raw, health = _one_storm(b, total, deadline_s)
        for k, v in raw["statuses"].items():
            statuses[k] = statuses.get(k, 0) + v
        for k, v in health["statuses"].items():
            health_statuses[k] = health_statuses.get(k, 0) + v
        lat.extend(raw["latencies_ms"])
        hl.extend(health["latencies_ms"])
        elapsed += raw["elapsed_s"]
        rss_after_each.append(b.gateway.rss_mb())
        if first_calls is None:
            first_calls = _mock_calls(b, config.STORM[1])["count"] - calls_before
    rss_first, rss_last = rss_after_each[0], rss_after_each[-1]
    naive = total * (1 + DEFAULT_MAX_RETRIES)
    others = {}
    for side in b.sides:
        if side.features:
            continue
        side_hl: list[float] = []
        side_statuses: dict[str, int] = {}
        for _ in range(STORM_ROUNDS_OTHER):
            raw, health = _one_storm(b, total, deadline_s, side)
            side_hl.extend(health["latencies_ms"])
            for k, v in raw["statuses"].items():
                side_statuses[k] = side_statuses.get(k, 0) + v
        others[side.name] = {
            "server": side.server,
            "rounds": STORM_ROUNDS_OTHER,
            "statuses": side_statuses,
            "health_n": len(side_hl),
            "health_p99_ms": round(percentile(side_hl, 99), 2) if side_hl else None,
            "health_max_ms": round(max(side_hl), 2) if side_hl else None,
        }
    return {
        "others": others,
        "requests": total,
        "rounds": STORM_ROUNDS,
        "statuses": statuses,
        "only_429_503": all(k in ("429", "503") for k in statuses),
        "deadline_ms": config.STORM_TOTAL_TIMEOUT_MS,
        "max_latency_ms": round(max(lat), 1),
        "p50_latency_ms": round(percentile(lat, 50), 1),
        "all_within_deadline": max(lat) <= config.STORM_TOTAL_TIMEOUT_MS + 1000,
        "elapsed_s": round(elapsed, 2),
        "health_n": len(hl),
        "health_statuses": health_statuses,
        "health_p50_ms": round(percentile(hl, 50), 2) if hl else None,
        "health_p99_ms": round(percentile(hl, 99), 2) if hl else None,
        "health_max_ms": round(max(hl), 2) if hl else None,
        "rss_before_mb": rss_before,
        "rss_after_mb": rss_first,
        "rss_after_each_mb": rss_after_each,
        "rss_growth_pct": round((rss_first - rss_before) * 100 / rss_before, 1) if rss_before else None,
        "rss_growth_after_first_pct": round((rss_last - rss_first) * 100 / rss_first, 1) if rss_first else None,
        "rss_within_10pct": within(rss_last, rss_first, 0.10),
        "upstream_calls": first_calls,  # of the first storm, against the naive bound of one storm
        "naive_bound": naive,
        "calls_vs_naive": ratio(first_calls, naive),
    }


SCENARIOS = {
    "memory": memory,
    "latency": latency,
    "stream": stream,
    "throughput": throughput,
    "config": config_size,
    "storm": storm,
}
