"""Budgets' spend from the usage records, and limits shared across processes through Redis
(docs/limits.md#shared, docs/limits.md#durable).

One entry for their callers; each concern is a module of its own (routing.runtime.cluster.shared_*):

- `shared_spend`: the database spend loader (`SpendLoader`, `Process.spend`): every new budget account
  gets its period's spend from one aggregate query of every process's usage records.
- `shared_leases`: the Redis lease protocol (`Syncer`, `Process.syncer`, with REDIS_URL): budgets, rate
  limits and deployments' capacity leased from cluster counters and token buckets, one round per
  interval; `shared_scripts` holds its Lua scripts and key names, `shared_recovery` what it does while Redis is
  unreachable (an even share each) or after it lost the counters (rebuilt from the usage records).
- `shared_seats`: concurrency seats, a deployment's `max` split over the processes by demand.
- `shared_waiters`: the request path's side: wake the syncer and wait, bounded, for a round or a pass.

Neither background task is on the request path; the request path never calls Redis.
"""

from routing.runtime.cluster.shared_leases import IDLE_S, LEASE_FRACTION, PROCESS_TTL_S, Syncer
from routing.runtime.cluster.shared_scripts import KEY_PREFIX, account_key, bucket_key, namespace
from routing.runtime.cluster.shared_seats import seats_key
from routing.runtime.cluster.shared_spend import SpendLoader, budgeted, load_accounts, query_spend, read_spend
from routing.runtime.cluster.shared_waiters import (
    after_others_rounds,
    install,
    wait_for_lease,
    wait_loaded,
    wait_round,
    wake,
)

__all__ = [
    "IDLE_S",
    "KEY_PREFIX",
    "LEASE_FRACTION",
    "PROCESS_TTL_S",
    "SpendLoader",
    "Syncer",
    "account_key",
    "after_others_rounds",
    "bucket_key",
    "budgeted",
    "install",
    "load_accounts",
    "namespace",
    "query_spend",
    "read_spend",
    "seats_key",
    "wait_for_lease",
    "wait_loaded",
    "wait_round",
    "wake",
]
