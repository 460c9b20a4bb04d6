"""Which processes form one cluster: the name under which they share state in Redis.

Breaker transitions and leases (routing.runtime.cluster.breaker_sync) and the process list
(routing.runtime.cluster.process_list) are scoped by it, so two deployments or test
servers on one Redis never mix. See docs/scale-out.md#shared.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any


def cluster_name(configured: str, database: Mapping[str, Any]) -> str:
    """SWITCHBOARD_CLUSTER when set, else a short hash naming the configuration database."""
    if configured:
        return configured
    ident = f"{database.get('ENGINE')}|{database.get('HOST', '')}|{database.get('PORT', '')}|{database.get('NAME')}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]
