"""`python -m bench.unconfigured_bench`: what each feature costs a request that does not use it (docs/performance.md#unconfigured).

A feature nobody configured must cost at most 1 µs a request. For each optional feature
this times the exact test the request path makes when the feature is off, with the
arguments a plain chat request brings (a caller without limits or budget, a model without
cache, deployments without capacity, tracing and overload classes off, bodies not logged):
the function the path calls, or, where the path tests inline, the same expression.
timeit, best of `--repeat` interleaved rounds, in nanoseconds, minus an empty statement's
time in the same round.
"""

from __future__ import annotations

import argparse
import os
import timeit
from typing import Any

from bench import config, summary

TARGET_NS = 1000.0

# (feature, statement as the request path runs it when the feature is off, where it runs)
CHECKS: tuple[tuple[str, str, str], ...] = (
    ("rate limits", "limiting.admit(limiter, ctx, key, model, req)", "routing/gateway/app.py:_route"),
    (
        "budgets",
        "agent.budget is not None or org.budget is not None or key.budget is not None",
        "routing/gateway/app.py:_serve",
    ),
    (
        "response cache",
        "model.cache_ttl_s is not None",
        "routing/gateway/app.py:_route",
    ),
    ("deployment tpm capacity", "_capacity_tokens(ctx, links)", "routing/gateway/proxy.py:proxy_once"),
    ("key's model list", "key.models is not None", "routing/gateway/app.py:_model"),
    ("tracing", "process.tracing is not None", "routing/gateway/app.py:serve"),
    ("overload classes", "process.overload.on", "routing/gateway/app.py:_model"),
    ("body logging", "org.log_bodies or settings.SWITCHBOARD_LOG_BODIES", "routing/gateway/app.py:_model"),
    ("prompt-cache affinity", "snap.affine", "routing/gateway/app.py:_admit"),
)


def namespace() -> dict[str, Any]:
    """What the statements see: a plain request's objects, built from a one-model configuration."""
    from django.conf import settings

    from routing.config.snapshot import build_snapshot
    from routing.core.limiter import Limiter
    from routing.gateway import limiting
    from routing.gateway.proxy import _capacity_tokens
    from routing.plan import cache_key, chain, preflight
    from routing.runtime.accounting import Context
    from routing.runtime.process import current

    doc = config.one_model_document([{"name": "open", "agents": [{"name": "free"}]}])
    snap = build_snapshot(doc, [{"key_hash": "k", "prefix": "k", "org": "open", "agent": "free"}], {})
    key = snap.keys["k"]
    model = snap.models["m"]
    body = {"model": "m", "messages": [{"role": "user", "content": "What is the capital of France?"}]}
    ctx = Context("r", 0.0, "chat")
    ctx.requirements = req = preflight.requirements("chat", body)
    links = chain.build_chain(snap, key.agent.org, model, "m")
    return {
        "limiting": limiting,
        "limiter": Limiter(),
        "ctx": ctx,
        "key": key,
        "agent": key.agent,
        "org": key.agent.org,
        "model": model,
        "req": req,
        "body": body,
        "links": links,
        "cache_key": cache_key,
        "_capacity_tokens": _capacity_tokens,
        "process": current(),
        "settings": settings,
        "snap": snap,
    }


def measure(number: int, repeat: int) -> dict[str, float]:
    """Best-of-`repeat` nanoseconds per request for each check, less an empty statement's."""
    env = namespace()
    for feature, stmt, _ in CHECKS:  # each must take the feature's off path: a value that says "not used"
        value = eval(stmt, env)  # noqa: S307 - the module's own constant statements
        if value not in (None, False, 0):
            raise SystemExit(f"{feature}: {stmt} gave {value!r}, not the off path: the benchmark is void")
    best = {feature: float("inf") for feature, _, _ in CHECKS}
    for _ in range(repeat):  # interleaved, so a noisy neighbour hits every check alike
        empty = timeit.timeit("pass", number=number) / number
        for feature, stmt, _ in CHECKS:
            took = timeit.timeit(stmt, globals=env, number=number) / number
            best[feature] = min(best[feature], max(0.0, took - empty) * 1e9)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.unconfigured_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--number", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")
    import django

    django.setup()
    from gateway_project.process import build_process

    build_process(background=False)  # the checks read the serving process's parts, as the request path does
    best = measure(args.number, args.repeat)
    where = {feature: place for feature, _, place in CHECKS}
    for feature, ns in best.items():
        verdict = "ok" if ns <= TARGET_NS else "OVER"
        print(f"{feature:<24} {ns:8.1f} ns per request  ({where[feature]})  target ≤ {TARGET_NS:.0f} ns: {verdict}")
    summary.save("unconfigured", {"ns_per_request": best, "target_ns": TARGET_NS})


if __name__ == "__main__":
    main()
