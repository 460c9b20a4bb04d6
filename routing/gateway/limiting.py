"""Rate-limit and budget admission and settlement on the request path (docs/limits.md).

The buckets are routing.core.limiter's, the budget accounts routing.core.budget_accounts's,
one `Limiter` and one `Budgets` per process (the composition root's). A caller
whose key, agent and org have no limits and no budget costs three attribute tests each.
The caller is its API key (whose own limits and budget apply beside its agent's and
org's, docs/limits.md#keys) or, for callers without one, an agent. With shared limits the waits are on the
request's own process's syncer and spend loader, handed in by the caller (`call.process`): never the installed
process's, so two processes in one interpreter never wake or wait on each other's.
"""

from __future__ import annotations

import asyncio
import time
from typing import NoReturn

from routing.config.snapshot import AgentSpec, KeySpec, ModelSpec
from routing.core import errors
from routing.core.buckets import LEASE_WAIT_S
from routing.core.budget_accounts import NEW, Account, Budgets, Exhausted, Hold, Unloaded, request_cost
from routing.core.endpoints import ENDPOINTS
from routing.core.executor import Link
from routing.core.limiter import Limiter, LimitTicket, Refused
from routing.core.prices import priced, prices_now
from routing.plan.preflight import Requirements
from routing.runtime.accounting import Context
from routing.runtime.cluster import shared_limits
from routing.runtime.cluster.shared_limits import SpendLoader, Syncer
from routing.runtime.observe import metrics

# Output allowance when neither the request (max_tokens / max_completion_tokens) nor
# the model (max_output_tokens) gives one (docs/limits.md#tokens).
DEFAULT_OUTPUT_TOKENS = 1024
# The kinds whose endpoint rows produce no output tokens (embeddings, rerank): no output allowance.
_NO_OUTPUT = frozenset(row.kind for row in ENDPOINTS if not row.output)


class LeaseNeeded(Exception):
    """A shared bucket's local share is too small for this request: wait for the syncer (admit_after_lease)."""


Caller = AgentSpec | KeySpec


def _key_of(caller: Caller) -> tuple[AgentSpec, KeySpec | None]:
    if isinstance(caller, KeySpec):
        return caller.agent, caller
    return caller, None


def admit(
    limiter: Limiter,
    ctx: Context,
    caller: Caller,
    model: ModelSpec,
    req: Requirements,
    syncer: Syncer | None = None,
) -> LimitTicket | None:
    """Take this request from the caller's buckets, or raise 429 `rate_limited` (nothing sent upstream).

    With shared limits (`syncer`, the request's process's; None: limits are per process), raises
    `LeaseNeeded` when only the local share is short, after waking `syncer`.
    """
    agent, key = (caller.agent, caller) if isinstance(caller, KeySpec) else (caller, None)  # _key_of, inline
    org = agent.org
    key_limits = key.limits if key is not None else None
    if org.limits is None and agent.limits is None and key_limits is None:
        return None

    def tokens() -> int:
        return req.estimated_tokens + _output_allowance(model, req)

    try:
        ticket = limiter.admit(
            org.name, org.limits, agent.name, agent.limits, tokens, key.prefix if key else "", key_limits
        )
    except Refused as refused:
        if refused.short and shared_limits.wake(syncer):
            raise LeaseNeeded() from None
        _refuse(refused, ctx, agent, key)
    ctx.ratelimit = ticket
    return ticket


async def admit_after_lease(
    limiter: Limiter, ctx: Context, caller: Caller, model: ModelSpec, req: Requirements, syncer: Syncer | None
) -> LimitTicket | None:
    """The local share was short: wait for the syncer's rounds, each of which asks the cluster buckets for
    what every waiting request needs, until this one is admitted, or a round saw a cluster bucket lack it
    (429), or LEASE_WAIT_S passed without one (a slow Redis; 429 too), docs/limits.md#shared."""
    agent, key = _key_of(caller)
    org = agent.org
    deadline = time.monotonic() + LEASE_WAIT_S
    confirmed = False
    while True:
        left = deadline - time.monotonic()
        rounded = left > 0 and await shared_limits.wait_round(syncer, left)
        try:
            ticket = limiter.admit(
                org.name,
                org.limits,
                agent.name,
                agent.limits,
                lambda: req.estimated_tokens + _output_allowance(model, req),
                key.prefix if key else "",
                key.limits if key else None,
            )
        except Refused as refused:
            if rounded and refused.short:
                continue  # its share was taken by others meanwhile; the cluster bucket still has room
            if rounded and refused.lacking and not confirmed:
                # The cluster bucket lacked it. Other processes give back what they hold beyond their
                # waiters (refunds, a share ahead of use near the end) at their next round: ask once
                # more in a round that begins after theirs.
                confirmed = True
                await shared_limits.after_others_rounds(syncer, deadline)
                for bucket, amount in refused.lacking:
                    bucket.need += amount
                continue
            _refuse(refused, ctx, agent, key)
        ctx.ratelimit = ticket
        return ticket


def _whose(scope: str, agent: AgentSpec, key: KeySpec | None) -> str:
    """The owner of a limit or budget, as the error message names it."""
    if scope == "org":
        return f"org {agent.org.name!r}"
    if scope == "key" and key is not None:
        return f"API key '{key.prefix}…'"
    return f"agent '{agent.org.name}/{agent.name}'"


def _refuse(refused: Refused, ctx: Context, agent: AgentSpec, key: KeySpec | None = None) -> NoReturn:
    ctx.ratelimit = refused.ticket
    metrics.rate_limited(refused.scope, refused.limit)
    name = _whose(refused.scope, agent, key)
    raise errors.rate_limit_exceeded(
        name, refused.limit, refused.value, refused.amount, refused.retry_after_s
    ) from None


def settle(ticket: LimitTicket, ctx: Context) -> None:
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


def _output_allowance(model: ModelSpec, req: Requirements) -> int:
    """The output tokens a request may produce: max_tokens, else the model's max_output_tokens, else 1024."""
    if req.kind in _NO_OUTPUT:
        return 0
    return req.max_output_tokens or model.max_output_tokens or DEFAULT_OUTPUT_TOKENS


# The least prompt a budget reserves for (docs/limits.md#reservation): characters / 4 and 4 tokens a message
# are short of what providers bill a short prompt (a role, the reply's priming, a system prompt of their
# own: the mock bills 12 for "hi", estimated 5), and a burst of such requests on a half-spent budget
# went 1-2 % over it. Settled at the real cost all the same.
RESERVE_PROMPT_FLOOR = 16


def worst_cost(links: list[Link], req: Requirements) -> float:
    """The request's worst-case cost in USD: the prompt estimate (at least RESERVE_PROMPT_FLOOR tokens) and
    the output allowance at the prices of the dearest link that may serve it (a fallback may cost more)."""
    prompt = max(req.estimated_tokens, RESERVE_PROMPT_FLOOR)
    worst = 0.0
    now = time.time()
    for link in links:
        if link.skip_reason is None:
            model = link.model
            # A deployment's negotiated prices may be dearer than the model's (docs/configuration.md#price-versions).
            for served in (model, *(d.model for d in model.deployments)):
                _, input_price, output_price, _ = prices_now(served, now)
                cost = request_cost(input_price, output_price, prompt, _output_allowance(model, req))
                if cost > worst:
                    worst = cost
    return worst


# How long the first request of a new budget account waits for its period's spend (the usage
# records' aggregate, read in the background); after that it goes on with what is known.
LOAD_WAIT_S = 2.0


async def reserve(
    budgets: Budgets,
    caller: Caller,
    links: list[Link],
    req: Requirements,
    syncer: Syncer | None = None,
    spend: SpendLoader | None = None,
) -> Hold:
    """Reserve the worst-case cost on the caller's budgets, or raise 402 `budget_exceeded` (nothing sent upstream).

    Call only when the agent or its org has a budget. `syncer` and `spend` are the request's process's (None:
    budgets are per process; no loader). With shared budgets, a request the
    local lease cannot cover waits for the background's rounds (each leases what every waiting
    request needs) until it fits, or a round saw the cluster counter lack it, or LEASE_WAIT_S passed.
    """
    agent, key = _key_of(caller)
    org = agent.org
    amount = worst_cost(links, req)
    ident, key_budget = (key.prefix, key.budget) if key is not None else ("", None)
    try:
        return budgets.admit(org.name, org.budget, agent.name, agent.budget, amount, ident, key_budget)
    except Unloaded as unloaded:  # once per new account: its period's spend (docs/limits.md#durable)
        await _wait_loaded(spend, unloaded.accounts)
    except Exhausted as exhausted:
        return await _after_refusal(budgets, caller, amount, exhausted, syncer)
    try:
        return budgets.admit(org.name, org.budget, agent.name, agent.budget, amount, ident, key_budget)
    except Exhausted as exhausted:
        return await _after_refusal(budgets, caller, amount, exhausted, syncer)


async def _after_refusal(
    budgets: Budgets, caller: Caller, amount: float, refused: Exhausted, syncer: Syncer | None
) -> Hold:
    """Only a lease was short: wait for the background's rounds (each leases what every waiting
    request needs) until it fits, or a round saw the cluster counter lack it (then once more after
    the other processes' rounds), or LEASE_WAIT_S passed; else 402."""
    agent, key = _key_of(caller)
    org = agent.org
    ident, key_budget = (key.prefix, key.budget) if key is not None else ("", None)
    deadline = time.monotonic() + LEASE_WAIT_S
    rounded = confirmed = False
    waits_on = refused.accounts if refused.short else []
    for account in waits_on:  # what a round leases for the waiters stays until they resume (Syncer)
        account.waiting += amount
    try:
        while refused.short or (rounded and refused.lacking and not confirmed):
            if not refused.short:  # a round saw the counter lack it: once more after the others' rounds
                confirmed = True  # (what they hold beyond their waiters goes back then), as for rate limits
                await shared_limits.after_others_rounds(syncer, deadline)
                for account in refused.lacking:
                    account.need += amount
            left = deadline - time.monotonic()
            if left <= 0 or not await shared_limits.wait_for_lease(syncer, refused.account, left):
                break
            rounded = True
            try:
                return budgets.admit(org.name, org.budget, agent.name, agent.budget, amount, ident, key_budget)
            except Exhausted as exhausted:
                refused = exhausted
    finally:
        for account in waits_on:
            account.waiting = max(0.0, account.waiting - amount)
    metrics.rate_limited(refused.scope, "budget")
    account = refused.account
    name = _whose(refused.scope, agent, key)
    raise errors.budget_exceeded(
        name,
        account.usd,
        account.spend(),
        account.reserved,
        refused.amount,
        account.period,
        refused.resets_in_s,
    ) from None


async def _wait_loaded(spend: SpendLoader | None, accounts: list[Account]) -> None:
    """Wait (at most LOAD_WAIT_S) for the spend loader to read these accounts; then go on with what is known."""
    loop = asyncio.get_running_loop()
    end = loop.time() + LOAD_WAIT_S
    while any(a.state == NEW for a in accounts) and loop.time() < end:
        if not await shared_limits.wait_loaded(spend, end - loop.time()):
            break
    for account in accounts:
        account.waited = True


def settle_budget(hold: Hold, ctx: Context) -> None:
    """Replace the reservation with the real cost once the answer is over.

    Answered with usage → its cost at the serving model's prices (a missing price costs 0);
    answered without usage → the reservation stands; no answer, or an answer from the
    response cache (docs/cache.md) → released.
    """
    if ctx.status != 200 or ctx.cache == "hit" or ctx.cache == "coalesced":  # no upstream call: costs nothing
        hold.release()
        return
    prompt, completion = ctx.prompt_tokens, ctx.completion_tokens
    outcome = ctx.outcome
    link = outcome.link if outcome is not None else None
    if (prompt is None and completion is None) or link is None:
        hold.settle(None)
        return
    _, input_price, output_price, class_prices = prices_now(link.model, time.time())
    cost = priced(
        input_price,
        output_price,
        class_prices,
        prompt or 0,
        completion or 0,
        ctx.token_classes,
        strict=False,
    )
    hold.settle(cost or 0.0)
