"""A serving process owns its parts (docs/architecture.md#composition-root).

Every long-lived part is a field of `routing.runtime.process.Process` (or of an object it
holds), built by the composition root; modules do not keep them in variables of their own.
Three rules hold that in place: no `global` statement in product code outside the short list
below, each entry saying why that one is a value of the interpreter and not a part of a
process; no module-level container on the request path's floors outside a second list; and
two processes built in one interpreter (the test fixture's and the session's) share no part.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from routing.config import live

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("routing", "providers", "policies", "gateway_project")

# "path:function" -> why that module variable is the interpreter's and not a process's. Keep it at 5 at most.
ALLOWED_GLOBALS = {
    "routing/runtime/process.py:install": "the installed process itself: the one accessor for code with no "
    "request path to receive it from (views, admin, commands, background loops)",
    "routing/config/live.py:swap": "the configuration snapshot serving, swapped whole by reference on a reload: "
    "the interpreter's, read by the admin and commands as well as by every process",
    "routing/config/live.py:rebuild_from_db": "the last reload's refusal (message, version), set under the "
    "reload lock beside the snapshot and shown by the admin and /health",
}


def global_statements() -> list[str]:
    """Every `global` statement of product code, as "path:function" (one entry per statement)."""
    found = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            tree = ast.parse(path.read_text(), str(path))
            for fn in ast.walk(tree):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for node in ast.walk(fn):
                    if isinstance(node, ast.Global):
                        found.append(f"{path.relative_to(ROOT).as_posix()}:{fn.name}")
    return found


def test_global_statements_finds_them() -> None:
    """The scan itself: it sees the statements it is meant to refuse (a broken scan would pass anything)."""
    assert "routing/runtime/process.py:install" in global_statements()


def test_no_global_statement_outside_the_short_justified_list() -> None:
    """A long-lived part belongs to the process object, read through it (`process.feed`, `process.syncer`...):
    a module variable would be shared by every process of the interpreter and outlive the one that set it."""
    assert len(ALLOWED_GLOBALS) <= 5
    assert all(why.strip() for why in ALLOWED_GLOBALS.values())
    extra = [where for where in global_statements() if where not in ALLOWED_GLOBALS]
    assert extra == [], (
        "global statements outside tests/test_globals.py's ALLOWED_GLOBALS (make the state a field of the "
        "Process, or of an object it holds, built in gateway_project.process.build_process):\n" + "\n".join(extra)
    )


def test_two_processes_in_one_interpreter_share_no_part(session_process, process) -> None:
    """The fixture builds a whole process of its own: none of its parts is the session's."""
    from routing.runtime.process import Process, current

    assert current() is process and session_process is not process
    for f in dataclasses.fields(Process):
        mine, theirs = getattr(process, f.name), getattr(session_process, f.name)
        if mine is None or isinstance(mine, (bool, int, float, str)):
            continue
        assert mine is not theirs, f"Process.{f.name} is shared by two processes"
    assert process.overload.gates is process.gates and process.overload.hedges is process.hedges


def test_a_process_s_events_stay_its_own(session_process, process) -> None:
    """A breaker transition of the test's process reaches its own dashboard feed, not the session's."""
    from routing.core.breaker import BreakerKey
    from routing.runtime.observe import feed

    before = len(session_process.feed.recent)
    process.breakers.force_open(BreakerKey("own-provider", "own-model"), "a test", None)
    assert [e["kind"] for e in feed.events()][-1:] == ["breaker"]
    assert len(session_process.feed.recent) == before


def test_the_fixture_gives_the_session_s_process_back_whole(session_process) -> None:
    """After a test's own process: the session's is current again, with its own parts and the overload
    settings of the snapshot serving (a reload during the test configured the test's process only)."""
    from gateway_project.process import build_process, dispose, reinstall
    from routing.runtime.process import current

    own = build_process(background=False)
    try:
        live.swap(live.current())  # a reload during the test: applied to the current process, the test's
        assert current() is own
    finally:
        dispose(own)
        reinstall(session_process)
    assert current() is session_process
    assert session_process.overload.gates is session_process.gates
    assert session_process.overload.spec == (live.current().overload or session_process.overload.spec)


class _Waits:
    """Stands in for a process's syncer and spend loader: records what a request asked of it, helps with nothing
    (no round, no pass: the request goes on or is refused as without shared limits)."""

    degraded = reseeding = False
    _outage: frozenset = frozenset()
    interval_s = 0.001

    def __init__(self) -> None:
        self.asked: list[str] = []

    def starved(self) -> None:
        self.asked.append("wake")

    async def wait_round(self, timeout_s: float) -> bool:
        self.asked.append("round")
        return False

    async def wait_loaded(self, timeout_s: float) -> bool:
        self.asked.append("spend")
        return False


async def test_a_request_waits_on_its_own_process_s_syncer_and_loader_never_the_installed_one_s(process) -> None:
    """Two processes in one interpreter: a request served by one that is not the installed process waits for its
    new budget account's spend and for a larger lease on its own spend loader and syncer; the installed one's see
    nothing (they used to be found through `installed()`)."""
    import httpx

    from gateway_project.process import build_process, dispose, make_gateway, reinstall
    from routing.config.snapshot import build_snapshot
    from tests.gateway.conftest import API_KEY, key_rows

    serving = build_process(background=False)
    reinstall(process)  # `process` is the installed one; `serving` serves the request
    installed_waits, serving_waits = _Waits(), _Waits()
    kept = process.syncer, process.spend
    process.syncer = process.spend = installed_waits
    serving.syncer = serving.spend = serving_waits
    budgets = serving.budgets
    budgets.loading = budgets.shared = True  # a new account waits for its spend; its lease starts at 0
    budgets.starved = lambda account: None
    doc = {
        "providers": [{"name": "p", "base_url": "http://127.0.0.1:9/v1"}],
        "models": [
            {"id": "m", "provider": "p", "upstream_model": "m", "capabilities": ["chat"], "output_price_per_mtok": 10}
        ],
        "orgs": [{"name": "acme", "budget": {"usd": 1.0, "period": "day"}, "agents": [{"name": "bot"}]}],
    }
    previous = live.current()
    live.swap(build_snapshot(doc, key_rows(), {}, version=2))
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=make_gateway(serving)),
            base_url="http://gateway",
            headers={"Authorization": f"Bearer {API_KEY}"},
        ) as client:
            answer = await client.post(
                "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            )
    finally:
        live.swap(previous)
        process.syncer, process.spend = kept
        dispose(serving)
        reinstall(process)
    assert answer.status_code == 402  # no round grew the lease: refused as the docs say
    assert serving_waits.asked == ["spend", "round"]
    assert installed_waits.asked == []


async def test_a_request_s_counters_and_fallback_events_go_to_its_own_process_never_the_installed_one_s(
    process,
) -> None:
    """A request served by a process that is not the installed one (two in one interpreter) counts into its own
    dashboard counters and puts its fallback into its own feed; the installed one's see nothing."""
    import httpx

    from gateway_project.process import build_process, dispose, make_gateway, reinstall
    from routing.config.snapshot import build_snapshot
    from tests.gateway.conftest import API_KEY, key_rows

    serving = build_process(background=False)
    reinstall(process)  # `process` is the installed one; `serving` serves the request
    installed_events = len(process.feed.recent)
    doc = {
        "resilience": {"max_retries": 0},
        "providers": [{"name": "p", "base_url": "http://127.0.0.1:9/v1"}],
        "models": [
            {"id": "first", "provider": "p", "upstream_model": "m", "capabilities": ["chat"], "fallbacks": ["second"]},
            {"id": "second", "provider": "p", "upstream_model": "m", "capabilities": ["chat"]},
        ],
        "orgs": [{"name": "acme", "agents": [{"name": "bot"}]}],
    }
    previous = live.current()
    live.swap(build_snapshot(doc, key_rows(), {}, version=2))
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=make_gateway(serving)),
            base_url="http://gateway",
            headers={"Authorization": f"Bearer {API_KEY}"},
        ) as client:
            answer = await client.post(
                "/v1/chat/completions", json={"model": "first", "messages": [{"role": "user", "content": "hi"}]}
            )
    finally:
        live.swap(previous)
        dispose(serving)
        reinstall(process)
    assert answer.status_code >= 500  # nothing listens on port 9: both links fail
    assert [e["kind"] for e in serving.feed.recent] == ["fallback"]
    assert "second" in serving.counters.model_stats()
    assert len(process.feed.recent) == installed_events
    assert "second" not in process.counters.model_stats()


# Module-level containers the request path may reach: "module.name" -> why it is the interpreter's.
REQUEST_PATH_FLOORS = ("routing/runtime", "routing/gateway")
_PROMETHEUS = "label children of the interpreter's Prometheus metrics (the registry is the interpreter's)"
ALLOWED_CONTAINERS = {
    **{
        f"routing.runtime.observe.metrics.{name}": _PROMETHEUS
        for name in ("_cache", "_repins", "_input_tokens", "_unpriced", "_requests", "_attempts", "_fallbacks")
    },
    "routing.runtime.observe.metrics._circuits": _PROMETHEUS,
    "routing.runtime.observe.metrics._installed": "breaker registries already feeding the interpreter's circuit metric",
    "routing.runtime.observe.metrics.request_listeners": "a listener list of module functions (none in the product: "
    "each request counts into its own process's counters)",
    "routing.runtime.observe.health.change_listeners": "a listener list of module functions, each reading the installed "
    "process (the composition root fills it once)",
    "routing.runtime.usage.writer._column_converters": "per database alias, the converters of the UsageRecord "
    "columns: a function of the code and the database, not of a process",
    "routing.runtime.usage.sqlitebatch._statements": "per database alias, the SQL of a batch: a function of the code "
    "and the database, not of a process",
    "routing.runtime.usage.pgbatch._sql": "per database alias, the SQL of a batch (as above)",
    "routing.runtime.usage.writer._insert_sql": "per database alias, the INSERT of the Python path (as above)",
    "routing.runtime.usage.queue._exit_hooked": "sinks whose flush is registered with the interpreter's atexit",
}
_CONTAINERS = ("dict", "list", "set", "deque", "defaultdict", "OrderedDict", "WeakSet", "WeakValueDictionary")


def module_containers() -> list[str]:
    """Module-level names of request-path floors bound to an empty mutable container (state, not a table)."""
    found = []
    for floor in REQUEST_PATH_FLOORS:
        for path in sorted((ROOT / floor).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            for node in ast.parse(path.read_text(), str(path)).body:
                if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                    continue
                value = node.value
                empty = isinstance(value, (ast.Dict, ast.List, ast.Set)) and not (
                    getattr(value, "keys", None) or getattr(value, "elts", None)
                )
                built = isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", "")) in (
                    _CONTAINERS
                )
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if (empty or built) and isinstance(target, ast.Name) and not target.id.isupper():
                        found.append(f"{module}.{target.id}")
    return found


def test_no_module_level_state_the_request_path_reaches_outside_the_justified_list() -> None:
    """Results, events, counters, waiters' events: the process's (`process.probes`, `process.feed`...)."""
    assert "routing.runtime.observe.metrics._cache" in module_containers()  # the scan sees what it is meant to
    extra = [name for name in module_containers() if name not in ALLOWED_CONTAINERS]
    assert extra == [], "module-level state on the request path's floors (make it a part of the Process):\n" + (
        "\n".join(extra)
    )
