"""Rate-limit admission and settlement on the request path (docs/limits.md).

The buckets are routing.plan.limits's, one `Limiter` per process (the composition
root's). A caller whose org and agent have no limits costs one attribute test.
"""

from __future__ import annotations

from routing.config.snapshot import AgentSpec, ModelSpec
from routing.core import errors
from routing.ops import metrics
from routing.ops.accounting import Context
from routing.plan.limits import Limiter, Refused, Ticket
from routing.plan.preflight import Requirements

# Output allowance when neither the request (max_tokens / max_completion_tokens) nor
# the model (max_output_tokens) gives one (docs/limits.md#tokens).
DEFAULT_OUTPUT_TOKENS = 1024
_NO_OUTPUT = frozenset({"embeddings", "rerank"})


def admit(limiter: Limiter, ctx: Context, agent: AgentSpec, model: ModelSpec, req: Requirements) -> Ticket | None:
    """Take this request from the caller's buckets, or raise 429 `rate_limited` (nothing sent upstream)."""
    org = agent.org
    if org.limits is None and agent.limits is None:
        return None

    def tokens() -> int:
        if req.kind in _NO_OUTPUT:
            output = 0
        else:
            output = req.max_output_tokens or model.max_output_tokens or DEFAULT_OUTPUT_TOKENS
        return req.estimated_tokens + output

    try:
        ticket = limiter.admit(org.name, org.limits, agent.name, agent.limits, tokens)
    except Refused as refused:
        ctx.ratelimit = refused.ticket
        metrics.rate_limited(refused.scope, refused.limit)
        name = f"org {org.name!r}" if refused.scope == "org" else f"agent '{org.name}/{agent.name}'"
        raise errors.rate_limit_exceeded(
            name, refused.limit, refused.value, refused.amount, refused.retry_after_s
        ) from None
    ctx.ratelimit = ticket
    return ticket


def settle(ticket: Ticket, ctx: Context) -> None:
    """Correct the token reservation once the answer is over.

    Answered with usage → charged the real prompt + completion tokens; answered without
    usage → the reservation stands; no answer (an error before any, or the client left
    first) → the reservation is refunded. Requests are never refunded.
    """
    if ctx.cache == "hit" or ctx.cache == "coalesced":  # no upstream call: the request counts, its tokens do not
        ticket.refund()
    elif ctx.status == 200:
        prompt, completion = ctx.prompt_tokens, ctx.completion_tokens
        ticket.settle(None if prompt is None and completion is None else (prompt or 0) + (completion or 0))
    else:
        ticket.refund()
