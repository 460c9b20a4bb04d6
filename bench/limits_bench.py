"""`python -m bench.limits_bench`: what rate limits and budgets cost a request (docs/limits.md#cost).

timeit, best of several repeats, in microseconds per request, on the request path's
own functions: `limiting.admit` for a caller without limits, and for a caller with
rpm and tpm on both its agent and its org (four buckets; the prompt estimate of a
typical chat body included), plus its x-ratelimit-* headers and the settlement with
the real usage; then the same caller with a budget on its agent and its org as well
(the worst-case cost over the chain, the reservation on two accounts, the settlement
with the real cost). Each round moves the injected clocks so the buckets refill.
"""

from __future__ import annotations

import argparse
import os
import timeit

from bench import config, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")
    import django

    django.setup()

    from routing.config.snapshot import build_snapshot
    from routing.core.budget_accounts import Budgets
    from routing.core.executor import Outcome
    from routing.core.limiter import Limiter
    from routing.gateway import limiting
    from routing.plan import chain, preflight
    from routing.runtime.accounting import Context

    doc = config.one_model_document(
        [
            {
                "name": "acme",
                "limits": {"rpm": 10**9, "tpm": 10**12},
                "agents": [{"name": "bot", "limits": {"rpm": 10**9, "tpm": 10**12}}],
            },
            {
                "name": "paying",
                "limits": {"rpm": 10**9, "tpm": 10**12},
                "budget": {"usd": 10**9, "period": "month"},
                "agents": [
                    {"name": "bot", "limits": {"rpm": 10**9, "tpm": 10**12}, "budget": {"usd": 10**8, "period": "day"}}
                ],
            },
            {"name": "open", "agents": [{"name": "free"}]},
        ]
    )
    rows = [
        {"key_hash": h, "prefix": h, "org": o, "agent": a}
        for h, o, a in (("k1", "acme", "bot"), ("k2", "open", "free"), ("k3", "paying", "bot"))
    ]
    snap = build_snapshot(doc, rows, {})
    model = snap.models["m"]
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the capital of France? Answer in one word."},
        ],
        "max_tokens": 256,
    }
    now = [0.0]

    def clock() -> float:
        now[0] += 0.001
        return now[0]

    wall = [1_780_000_000.0]

    def wall_clock() -> float:
        wall[0] += 0.001
        return wall[0]

    limiter = Limiter(clock)
    budgets = Budgets(wall_clock)
    limited_agent, free, paying = snap.keys["k1"].agent, snap.keys["k2"].agent, snap.keys["k3"].agent
    links = chain.build_chain(snap, paying.org, model, "m")

    def run(coro):  # the reservation never waits here: drive it without a loop, as an await would
        try:
            coro.send(None)
        except StopIteration as done:
            return done.value
        raise RuntimeError("the reservation waited")

    fixed_ctx, fixed_req = Context("r", 0.0, "chat"), preflight.requirements("chat", body)

    def unlimited() -> None:  # a caller without limits: the whole cost is this call
        limiting.admit(limiter, fixed_ctx, free, model, fixed_req)

    def baseline() -> None:  # what every request already builds: its Context and Requirements
        Context("r", 0.0, "chat")
        preflight.requirements("chat", body)

    def limited() -> None:  # the same plus admission (4 buckets, prompt estimate), headers, settlement
        ctx = Context("r", 0.0, "chat")
        ticket = limiting.admit(limiter, ctx, limited_agent, model, preflight.requirements("chat", body))
        ticket.headers()
        ctx.status, ctx.prompt_tokens, ctx.completion_tokens = 200, 20, 7
        limiting.settle(ticket, ctx)

    shared = Limiter(clock)  # the same four buckets as shares of cluster buckets, already leased
    shared.shared = True
    try:
        shared.admit("acme", (10**9, 10**12), "bot", (10**9, 10**12), lambda: 1)
    except Exception:  # noqa: BLE001 - a new share is empty: it is refused once, then topped up here
        pass
    for _, bucket in shared.items():
        bucket.level = 1e18  # what the background lessor would have leased

    def limited_shared() -> None:  # limited() with REDIS_URL: admitted from the local share
        ctx = Context("r", 0.0, "chat")
        ticket = limiting.admit(shared, ctx, limited_agent, model, preflight.requirements("chat", body))
        ticket.headers()
        ctx.status, ctx.prompt_tokens, ctx.completion_tokens = 200, 20, 7
        limiting.settle(ticket, ctx)

    outcome = Outcome(None, None, links[0], 1, None, 0.0, [])

    def budgeted() -> None:  # limited() plus both budgets: worst case, reservation, settlement with the cost
        ctx = Context("r", 0.0, "chat")
        req = preflight.requirements("chat", body)
        ticket = limiting.admit(limiter, ctx, paying, model, req)
        hold = run(limiting.reserve(budgets, paying, links, req))
        ticket.headers()
        ctx.status, ctx.prompt_tokens, ctx.completion_tokens, ctx.outcome = 200, 20, 7, outcome
        limiting.settle(ticket, ctx)
        limiting.settle_budget(hold, ctx)

    variants = (
        ("unlimited", unlimited),
        ("baseline", baseline),
        ("limited", limited),
        ("limited_shared", limited_shared),
        ("budgeted", budgeted),
    )
    best: dict[str, float] = dict.fromkeys((name for name, _ in variants), 1e9)
    for _ in range(args.repeat):  # interleaved, so a noisy neighbour hits every variant alike
        for name, fn in variants:
            best[name] = min(best[name], timeit.timeit(fn, number=args.number) / args.number * 1e6)
    print(f"caller without limits: {best['unlimited']:.2f} µs per request")
    limited, budgeted = best["limited"] - best["baseline"], best["budgeted"] - best["baseline"]
    print(
        f"caller with rpm+tpm on agent and org: {limited:.2f} µs per request "
        f"(with: {best['limited']:.2f}, without the limits work: {best['baseline']:.2f})"
    )
    print(
        f"the same, shared (REDIS_URL), admitted from the local share: {best['limited_shared'] - best['baseline']:.2f}"
        f" µs per request (with: {best['limited_shared']:.2f})"
    )
    print(
        f"caller with rpm+tpm and a budget on agent and org: {budgeted:.2f} µs per request "
        f"(the budgets alone: {best['budgeted'] - best['limited']:.2f}); target ≤ 20 µs: "
        f"{'ok' if budgeted <= 20 else 'OVER'}"
    )
    summary.save(
        "limits",
        {
            "best_us": best,
            "limited_added_us": round(limited, 3),
            "limited_shared_added_us": round(best["limited_shared"] - best["baseline"], 3),
            "budgeted_added_us": round(budgeted, 3),
            "target_us": 20,
        },
    )


if __name__ == "__main__":
    main()
