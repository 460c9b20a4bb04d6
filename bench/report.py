"""The benchmark's table (from the results JSON) and the comparison of two results files.

Pure functions: tests/bench renders a sample result and checks the comparison logic.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

Row = list[str]
HEADER: Row = ["scenario", "metric", "direct", "gateway", "gateway - direct / ratio", "target", "ok"]

# Targets from the README's Performance section and issue 6 (None: no target, just reported).
TARGETS = {
    "added_p50": 0.5,
    "added_p99": 1.0,
    "ttfb_p50": 0.5,
    "c32_rps": 1500.0,
    "health_p99": 50.0,
    "rss_growth": 10.0,
}


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:,.0f}".replace(",", " ")
        if abs(value) >= 100:
            return f"{value:.1f}"
        text = f"{value:.{digits}f}".rstrip("0").rstrip(".")
        return "0" if text == "-0" else text
    if isinstance(value, int):
        return f"{value:,}".replace(",", " ")
    return str(value)


def signed(value: float | None) -> str:
    if value is None:
        return "-"
    return ("+" if value >= 0 else "") + fmt(value)


def verdict(ok: bool | None) -> str:
    return "" if ok is None else ("ok" if ok else "MISS")


def dig(d: dict[str, Any] | None, path: str) -> Any:
    """`d[a][b]...` for the dotted `path`, None where any part is missing."""
    cur: Any = d
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def rows(results: dict[str, Any]) -> list[Row]:
    """The table rows of one results document (scenarios that did not run are skipped)."""
    s = results.get("scenarios", {})
    out: list[Row] = []
    lat = s.get("latency")
    if lat:
        for key, label in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9")):
            delta = lat["added"][key]
            target = {"p50": TARGETS["added_p50"], "p99": TARGETS["added_p99"]}.get(key)
            out.append(
                [
                    "latency 1 client",
                    f"{label} ms",
                    fmt(lat["direct"][key]),
                    fmt(lat["gateway"][key]),
                    signed(delta),
                    f"≤ +{fmt(target)}" if target is not None else "",
                    verdict(delta <= target) if target is not None else "",
                ]
            )
        out.extend(_latency_rows(lat, "sides", "", (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9"))))
        out.extend(_latency_rows(lat, "peers", "latency 1 client", (("p50", "p50"), ("p99", "p99"))))
    st = s.get("stream")
    if st:
        for kind, label in (("ttfb", "first byte"), ("ttlb", "last byte")):
            for key in ("p50", "p99"):
                delta = st["added"][f"{kind}_{key}"]
                target = TARGETS["ttfb_p50"] if (kind, key) == ("ttfb", "p50") else None
                out.append(
                    [
                        f"stream {st['frames']} frames",
                        f"{label} {key} ms",
                        fmt(st["direct"][kind][key]),
                        fmt(st["gateway"][kind][key]),
                        signed(delta),
                        f"≤ +{fmt(target)}" if target is not None else "",
                        verdict(delta <= target) if target is not None else "",
                    ]
                )
    tp = s.get("throughput")
    if tp:
        for level in ("c1", "c32", "c128"):
            row = tp.get(level)
            if not row:
                continue
            n = level[1:]
            target = TARGETS["c32_rps"] if level == "c32" else None
            out.append(
                [
                    f"throughput {n} client{'s' if n != '1' else ''}",
                    "req/s",
                    fmt(row["direct"]["rps"]),
                    fmt(row["gateway"]["rps"]),
                    f"× {fmt(row['ratio'])}",
                    f"≥ {fmt(target)}" if target else "",
                    verdict(row["gateway"]["rps"] >= target) if target else "",
                ]
            )
            out.append(
                [
                    "",
                    "p99 ms",
                    fmt(row["direct"]["p99_ms"]),
                    fmt(row["gateway"]["p99_ms"]),
                    signed(round(row["gateway"]["p99_ms"] - row["direct"]["p99_ms"], 3)),
                    "",
                    "",
                ]
            )
            for side, entry in row.get("sides", {}).items():
                out.append(
                    [
                        "",
                        f"{side} req/s (p99 ms)",
                        "",
                        f"{fmt(entry['rps'])} ({fmt(entry['p99_ms'])})",
                        f"× {fmt(entry['vs_plain'])} of plain",
                        "",
                        "",
                    ]
                )
            for peer, entry in row.get("peers", {}).items():
                out.append(
                    [
                        "",
                        f"{peer} req/s (p99 ms)",
                        "",
                        f"{fmt(entry['rps'])} ({fmt(entry['p99_ms'])})",
                        f"Switchboard × {fmt(entry['vs_peer'])}",
                        f"≥ × {fmt(entry['target'])}" if level == "c32" and entry.get("target") else "",
                        verdict(entry["vs_peer"] is not None and entry["vs_peer"] >= entry["target"])
                        if level == "c32" and entry.get("target")
                        else "",
                    ]
                )
    mem = s.get("memory")
    if mem:
        out.append(["memory (RSS)", "idle MB", "", fmt(mem["idle_mb"]), "", "", ""])
        out.append(
            [
                "",
                f"after {fmt(mem.get('requests'))} requests MB",
                "",
                fmt(mem.get("after_10k_mb")),
                signed(_diff(mem.get("after_10k_mb"), mem["idle_mb"])),
                "",
                "",
            ]
        )
        if "streams_500_mb" in mem:
            out.append(
                [
                    "",
                    f"{fmt(mem['streams_open'])} open streams MB",
                    "",
                    fmt(mem["streams_500_mb"]),
                    f"{fmt(mem['per_stream_kb'])} KB/stream",
                    "",
                    "",
                ]
            )
            out.append(["", "after streams closed MB", "", fmt(mem["after_streams_mb"]), "", "", ""])
            left = mem.get("upstream_streams_left_open")
            out.append(["", "upstream streams left open", "", fmt(left), "", "0", verdict(left == 0)])
    cfg = s.get("config")
    if cfg:
        for size in ("small", "large"):
            c = cfg[size]
            out.append(
                [
                    "config size",
                    f"{fmt(c['models'])} models / {fmt(c['policies'])} policies",
                    "",
                    f"RSS {fmt(c['rss_mb'])} MB",
                    f"p50 {signed(c['added_p50'])} / p99 {signed(c['added_p99'])}",
                    "",
                    "",
                ]
            )
        out.append(["", "large - small added p50 ms", "", "", signed(cfg["delta_p50"]), "≈ 0 (O(1))", ""])
    sm = s.get("storm")
    if sm:
        statuses = ", ".join(f"{k}×{v}" for k, v in sorted(sm["statuses"].items()))
        out.append(
            [
                "429 storm",
                f"{sm.get('rounds', 1)} × {sm['requests']} requests: statuses",
                "",
                statuses,
                "",
                "429/503 only",
                verdict(sm["only_429_503"]),
            ]
        )
        out.append(
            [
                "",
                "max latency ms",
                "",
                fmt(sm["max_latency_ms"]),
                f"deadline {fmt(sm['deadline_ms'])}",
                "within",
                verdict(sm["all_within_deadline"]),
            ]
        )
        out.append(
            [
                "",
                "/health p99 ms (max)",
                "",
                f"{fmt(sm['health_p99_ms'])} ({fmt(sm['health_max_ms'])})",
                f"n={sm['health_n']}",
                f"< {fmt(TARGETS['health_p99'])}",
                verdict(sm["health_p99_ms"] is not None and sm["health_p99_ms"] < TARGETS["health_p99"]),
            ]
        )
        for side, other in sm.get("others", {}).items():
            out.append(
                [
                    "",
                    f"{side}: /health p99 ms (max), {other['rounds']} storms",
                    "",
                    f"{fmt(other['health_p99_ms'])} ({fmt(other['health_max_ms'])})",
                    f"n={other['health_n']}",
                    f"< {fmt(TARGETS['health_p99'])}",
                    verdict(other["health_p99_ms"] is not None and other["health_p99_ms"] < TARGETS["health_p99"]),
                ]
            )
        out.append(
            [
                "",
                f"RSS before → after storm 1 → after storm {sm.get('rounds', 1)} MB",
                "",
                f"{fmt(sm['rss_before_mb'])} → {fmt(sm['rss_after_mb'])} → {fmt((sm.get('rss_after_each_mb') or [sm['rss_after_mb']])[-1])}",
                f"{signed(sm.get('rss_growth_after_first_pct', sm['rss_growth_pct']))} % after the first",
                f"≤ +{fmt(TARGETS['rss_growth'])} %",
                verdict(sm["rss_within_10pct"]),
            ]
        )
        out.append(
            [
                "",
                "upstream calls",
                "",
                fmt(sm["upstream_calls"]),
                f"× {fmt(sm['calls_vs_naive'])} of naive {fmt(sm['naive_bound'])}",
                "< naive",
                verdict(sm["upstream_calls"] < sm["naive_bound"]),
            ]
        )
    return out


def feature_cost(lat: dict[str, Any], side: str) -> dict[str, float] | None:
    """What the features add over the plain gateway on the same server: added(features) - added(plain)."""
    sides = lat.get("sides", {})
    features = sides.get(side)
    if not features:
        return None
    server = features.get("server")
    plain = next((v for name, v in sides.items() if v.get("server") == server and "features" not in name), None)
    base = plain["added"] if plain else lat["added"]  # the plain gateway runs the default server
    return {k: round(features["added"][k] - base[k], 3) for k in ("p50", "p99", "p999")}


def _latency_rows(lat: dict[str, Any], group: str, scenario: str, keys: Iterable[tuple[str, str]]) -> list[Row]:
    """One row per percentile of every side (or peer) measured beside the gateway."""
    out: list[Row] = []
    for side, stats in lat.get(group, {}).items():
        for key, label in keys:
            out.append(
                [
                    scenario,
                    f"{label} ms, {side}",
                    fmt(lat["direct"][key]),
                    fmt(stats[key]),
                    signed(stats["added"][key]),
                    "",
                    "",
                ]
            )
        cost = feature_cost(lat, side)
        if cost and "features" in side:
            text = " / ".join(f"{signed(cost[k])}" for k in ("p50", "p99", "p999"))
            out.append(["", f"{side} - plain, p50 / p99 / p99.9 ms", "", "", text, "", ""])
    return out


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 3)


def render(table: Sequence[Row], header: Row = HEADER) -> str:
    """Fixed-width text table: every column as wide as its widest cell."""
    all_rows = [header, *table]
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    text = ["  ".join(c.ljust(w) for c, w in zip(header, widths, strict=True)).rstrip(), line]
    for r in table:
        text.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(text)


# --- comparison ---------------------------------------------------------------------------

# The numbers `bench.compare` shows by default: (path under "scenarios", higher is better)
HEADLINES: tuple[tuple[str, bool], ...] = (
    ("latency.added.p50", False),
    ("latency.added.p99", False),
    ("latency.added.p999", False),
    ("latency.gateway.p50", False),
    ("stream.added.ttfb_p50", False),
    ("stream.added.ttfb_p99", False),
    ("stream.added.ttlb_p50", False),
    ("throughput.c1.gateway.rps", True),
    ("throughput.c32.gateway.rps", True),
    ("throughput.c128.gateway.rps", True),
    ("throughput.c32.gateway.p99_ms", False),
    ("throughput.c128.gateway.p99_ms", False),
    ("throughput.c32.ratio", True),
    ("throughput.c128.ratio", True),
    ("memory.idle_mb", False),
    ("memory.after_10k_mb", False),
    ("memory.streams_500_mb", False),
    ("memory.per_stream_kb", False),
    ("config.small.added_p50", False),
    ("config.large.added_p50", False),
    ("storm.upstream_calls", False),
    ("storm.health_p99_ms", False),
    ("storm.max_latency_ms", False),
    ("storm.rss_growth_pct", False),
)


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Every numeric leaf (bools excluded) as a dotted path -> value."""
    out: dict[str, float] = {}
    for k, v in d.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, path + "."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[path] = float(v)
    return out


def _higher_is_better(path: str) -> bool:
    for p, higher in HEADLINES:
        if p == path:
            return higher
    return path.endswith(".rps") or path.endswith(".ratio") or path.endswith("vs_peer")


def compare(
    before: dict[str, Any], after: dict[str, Any], tolerance: float = 0.20, everything: bool = False
) -> list[dict[str, Any]]:
    """One entry per metric present in both: before, after, delta, percent and a verdict.

    A change smaller than `tolerance` (fraction of the before value) is "same": machines
    are noisy, so only larger moves are called better or worse.
    """
    b = flatten(before.get("scenarios", {}))
    a = flatten(after.get("scenarios", {}))
    paths: Iterable[str] = sorted(set(a) & set(b)) if everything else [p for p, _ in HEADLINES if p in a and p in b]
    out = []
    for path in paths:
        old, new = b[path], a[path]
        delta = new - old
        pct = None if old == 0 else delta * 100 / abs(old)
        if pct is None:
            moved = delta != 0
        else:
            moved = abs(pct) > tolerance * 100
        if not moved:
            word = "same"
        else:
            word = "better" if (delta > 0) == _higher_is_better(path) else "worse"
        out.append(
            {
                "metric": path,
                "before": old,
                "after": new,
                "delta": round(delta, 3),
                "pct": None if pct is None else round(pct, 1),
                "verdict": word,
            }
        )
    return out


def compare_table(entries: Sequence[dict[str, Any]]) -> str:
    header = ["metric", "before", "after", "delta", "%", "verdict"]
    body = [
        [
            e["metric"],
            fmt(e["before"]),
            fmt(e["after"]),
            signed(e["delta"]),
            "-" if e["pct"] is None else signed(e["pct"]),
            e["verdict"],
        ]
        for e in entries
    ]
    return render(body, header)
