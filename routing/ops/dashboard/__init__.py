"""The live dashboard: what an operator sees of this process, from memory only.

- `counters`: per-model rolling counters (requests, errors, fallbacks per second);
- `feed`: events (breaker transitions, fallbacks, probes, controls), batched out to
  the "switchboard.dashboard" group, and the serving loop sync views read through;
- `state`: this process's full state (links with breakers, providers, counters,
  feed) and the broadcaster that publishes it;
- `consumer`: the staff-only websocket; `views` / `urls`: the pages.

Operator controls (reset / force open) are routing.ops.controls.
"""
