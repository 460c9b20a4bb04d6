"""The response cache on the request path (docs/cache.md): look up, join, or call and store.

routing.plan.cache_key decides what may be cached and under which key; the store and
the in-flight table are the process's (routing.runtime.cache.response_cache, built by the
composition root). A request of a model without `cache_ttl_s` never gets here.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from routing.core import errors
from routing.core.errors import GatewayError
from routing.core.executor import Link, Outcome
from routing.gateway.proxy import Call
from routing.gateway.wire import JSON, Headers, answer_headers
from routing.plan.cache_key import BYPASS as BYPASSED
from routing.plan.cache_key import COALESCED, HIT, MISS
from routing.runtime.accounting import Context
from routing.runtime.cache.response_cache import BYPASS, Coalescer, Entry, Handover, Store

Answer = tuple[int, Headers, bytes]
_monotonic = time.monotonic


async def serve(store: Store, coalescer: Coalescer, call: Call, compute: Callable[[], Awaitable[Answer]]) -> Answer:
    """The answer of a request to a cached model (`call.plan`): stored, shared with an identical one in
    flight, or fresh from `compute`."""
    ctx, links, deadline = call.ctx, call.links, call.deadline
    plan = call.plan
    assert plan is not None
    if not plan.read:
        ctx.cache = BYPASSED
        answer = await compute()
        if plan.store:
            store.put(plan.key, _entry(ctx, answer[2]), plan.ttl_s)
        return answer
    key = plan.key
    while True:
        result = MISS
        claimed = False
        flight = coalescer.flight(key)
        if flight is None:
            # the lookup takes the cluster-wide claim on a miss in the same round trip
            found, claimed = await store.get_or_claim(key, deadline - _monotonic())
            if found is BYPASS:
                result = BYPASSED
            elif found is not None:
                return _served(ctx, found, links, HIT)
            flight = coalescer.flight(key)  # one may have started while this one looked (the claim,
            # if this lookup took it, is the process's: that leader's store or release frees it)
        if flight is not None:
            waited = _monotonic()
            try:
                shared = await coalescer.follow(flight, deadline - waited)
            except Handover:
                continue  # its client left: this one calls (or joins whoever did first)
            except TimeoutError:
                ctx.cache = MISS
                raise errors.total_timeout(links[0].model.timeouts.total_ms / 1000.0) from None
            if isinstance(shared, GatewayError):
                ctx.cache = MISS  # not answered from the cache: the shared call's error
                raise shared  # one call, one outcome: its error is every waiter's
            return _served(ctx, shared, links, COALESCED, _monotonic() - waited)
        ctx.cache = result
        flight = coalescer.lead(key)
        try:
            if result is MISS and not claimed and not store.holds(key):
                # Another process is making this very call: its answer, once stored, is this one's.
                waited = _monotonic()
                shared = await store.wait_other(key, deadline - waited)
                if shared is not None:
                    coalescer.finish(key, flight, shared)
                    return _served(ctx, shared, links, COALESCED, _monotonic() - waited)
            answer = await compute()
        except GatewayError as exc:
            store.release(key)
            coalescer.finish(key, flight, exc)  # errors are never stored
            raise
        except BaseException:
            store.release(key)
            coalescer.abandon(key, flight)
            raise
        entry = _entry(ctx, answer[2])
        coalescer.finish(key, flight, entry)
        if plan.store:
            store.put(key, entry, plan.ttl_s)
        return answer


def _entry(ctx: Context, body: bytes) -> Entry:
    link = ctx.outcome.link if ctx.outcome is not None else None
    model = link.model if link is not None else None
    return Entry(
        body,
        model.id if model is not None else "",
        model.provider.name if model is not None else "",
        ctx.prompt_tokens,
        ctx.completion_tokens,
    )


def _served(ctx: Context, entry: Entry, links: list[Link], result: str, waited_s: float = 0.0) -> Answer:
    """A stored or shared answer: no upstream attempt, the model that served it, cost 0.

    Time spent waiting for another request's upstream call counts as upstream time,
    not as the gateway's overhead (docs/metrics.md#prometheus-metrics)."""
    link = next((link for link in links if link.model.id == entry.model_used), None)
    ctx.outcome = Outcome(None, None, link, 0, None, waited_s, [])
    ctx.cache = result
    ctx.status = 200
    ctx.prompt_tokens, ctx.completion_tokens = entry.prompt_tokens, entry.completion_tokens
    return 200, answer_headers(ctx, [JSON]), entry.body
