"""Prompt-cache affinity (docs/deployments.md#affinity): one conversation, one deployment.

A provider caches a prompt's prefix per deployment (per account, region or endpoint); a
balancer that spreads one conversation over N deployments makes each of them see the
prefix for the first time and pay the full input price, so the cache-hit rate falls
toward 1/N. A model with `affinity: {ttl_s: N}` pins each conversation to the deployment
that served it last, for N seconds since its last use.

`key_of` names the conversation; `Pins` holds the pins of one process (bounded, least
recently used first out). Pure: the clock is the caller's. The pins shared through Redis
(routing.runtime.cluster.affinity_sync) enter with `merge` and leave through `outbox`, both
off the request path.
"""

from __future__ import annotations

import contextvars
import hashlib
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from operator import itemgetter
from typing import Any

import orjson

SESSION_HEADER = b"x-switchboard-session"
_NAME = itemgetter(0)  # a header's name
MAX_PINS = 100_000  # per process; the least recently used pin goes first beyond it
MAX_KEY = 200  # characters of a client-given key kept (a longer one is hashed)
_OUTBOX_MAX = 10_000  # pins waiting to be shared; beyond it the newest are not shared

# The conversation of the request this task serves: set by the gateway (routing.gateway.app) only while some
# model has affinity, read by the executor only for a model that has it.
conversation: contextvars.ContextVar[str | None] = contextvars.ContextVar("switchboard_affinity", default=None)


def key_of(headers: Iterable[tuple[bytes, bytes]], body: Mapping[str, Any], original: Any = None) -> str | None:
    """The conversation a request belongs to, first found of (docs/deployments.md#affinity):

    1. the `X-Switchboard-Session` header;
    2. `prompt_cache_key` in the body (OpenAI's own cache-routing hint);
    3. `metadata.user_id` of an Anthropic Messages body (`original`);
    4. a hash of the prompt's stable prefix (`stable_prefix`).

    None when there is none of these (an embeddings call): the request is not pinned.
    """
    if SESSION_HEADER in map(_NAME, headers):  # a scan in C first: most requests have no such header
        for name, value in headers:
            if name == SESSION_HEADER and value:
                return _given("s:", value.decode("latin-1"))
    given = body.get("prompt_cache_key")
    if isinstance(given, str) and given:
        return _given("p:", given)
    if isinstance(original, dict):
        metadata = original.get("metadata")
        user = metadata.get("user_id") if isinstance(metadata, dict) else None
        if isinstance(user, str) and user:
            return _given("u:", user)
    sample = _sampled_prefix(body)
    if sample is None:
        return None
    # A checksum of a bounded sample of the prefix, not of all of it: an agent's prefix is tens of kB (its
    # tools' schemas, a long system prompt), and writing it out and summing it took 50 µs a request. A
    # checksum, not a cryptographic hash: two conversations that share one merely share a deployment.
    data = orjson.dumps(sample, option=orjson.OPT_SORT_KEYS)
    return f"h:{zlib.crc32(data):08x}{len(data):x}"


def _given(kind: str, value: str) -> str:
    return kind + (value if len(value) <= MAX_KEY else _digest(value.encode()))


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def stable_prefix(body: Mapping[str, Any]) -> list[Any] | None:
    """What stays the same over the turns of one conversation: the tools, and the messages up to and
    including the first user message (the system and developer prompts before it, and that message).

    Chat bodies (`messages`; an Anthropic Messages body arrives here as chat, its `system` a first
    system message) and Responses bodies (`instructions`, `tools`, and `input` up to its first user
    item, or the whole `input` when it is a string). None for any other body.
    """
    messages = body.get("messages")
    if isinstance(messages, list):
        return [body.get("tools"), _through_first_user(messages)]
    if "input" in body and "instructions" in body or isinstance(body.get("input"), list):
        given = body.get("input")
        head = _through_first_user(given) if isinstance(given, list) else given
        return [body.get("instructions"), body.get("tools"), head]
    return None


def _through_first_user(items: list[Any]) -> list[Any]:
    for i, item in enumerate(items):
        if isinstance(item, dict) and item.get("role") == "user":
            return items[: i + 1]
    return items[:1]


# A long string is sampled: its length, _END characters of each end and about _SPREAD evenly spaced over its
# middle (so a difference anywhere in it usually shows); one of at most _WHOLE characters is kept whole.
_END = 128
_SPREAD = 64
_WHOLE = 2 * _END + _SPREAD


def _sampled_prefix(body: Mapping[str, Any]) -> list[Any] | None:
    """`stable_prefix` reduced to a sample of bounded size, whatever the prefix's size, for the key.

    The tools' count with the names of the first and the last (their schemas, most of an agent's
    prefix, tell few conversations apart); the instructions and the messages through the first user
    message as they are, each long string in them sampled (`_cut`). Only the common shapes are
    walked (content a string, or a list of parts); orjson then writes the sample out, keys sorted,
    so the same prefix gives the same key in every process and every turn. One pass, few calls:
    this runs on every request of a model with affinity.
    """
    messages = body.get("messages")
    if isinstance(messages, list):
        return [_tools(body.get("tools")), _head(messages)]
    given = body.get("input")
    if "input" in body and "instructions" in body or isinstance(given, list):  # as stable_prefix
        return [
            _cut(body.get("instructions")),
            _tools(body.get("tools")),
            _head(given) if isinstance(given, list) else _cut(given),
        ]
    return None


def _tools(tools: Any) -> Any:
    if not isinstance(tools, list) or len(tools) <= 2:
        return tools
    return [len(tools), _tool_name(tools[0]), _tool_name(tools[-1])]


def _tool_name(tool: Any) -> Any:
    if not isinstance(tool, dict):
        return tool
    function = tool.get("function")
    return function.get("name") if isinstance(function, dict) else tool.get("name", tool.get("type"))


def _head(items: list[Any]) -> list[Any]:
    """`_through_first_user`, each message as it is, or its role and its content sampled when that is long
    (inlined `_cut`: the common case, a long system prompt or first message, in as few steps as can be)."""
    out: list[Any] = []
    for item in items:
        if not isinstance(item, dict):
            out.append(_cut(item))
            continue
        content, role = item.get("content"), item.get("role")
        if isinstance(content, str):
            n = len(content)
            if n <= _WHOLE:
                out.append(item)
            else:
                step = (n - 2 * _END) // _SPREAD + 1
                out.append((role, n, content[:_END], content[_END : n - _END : step], content[-_END:]))
        elif isinstance(content, list):
            out.append((role, list(map(_part, content))))
        else:
            out.append(item)
        if role == "user":
            return out
    return out[:1]


def _part(part: Any) -> Any:
    """A content part with its long strings sampled: a text part's text, else its fields and theirs (an
    image's URL, an audio's or a file's data)."""
    text = part.get("text") if isinstance(part, dict) else part
    if isinstance(text, str):  # a text part (its cache_control and the like are left out when it is long)
        return part if len(text) <= _WHOLE else _cut(text)
    if not isinstance(part, dict):
        return part
    return {k: {k2: _cut(v2) for k2, v2 in v.items()} if isinstance(v, dict) else _cut(v) for k, v in part.items()}


def _cut(value: Any) -> Any:
    if not isinstance(value, str) or len(value) <= _WHOLE:
        return value
    n = len(value)
    return [n, value[:_END], value[_END : n - _END : (n - 2 * _END) // _SPREAD + 1], value[-_END:]]


class Pins:
    """The deployment each (model, conversation) is pinned to, with a sliding expiry.

    `get` answers a pin still alive and renews it; `put` sets one (a re-pin when it replaces
    another that was alive). A pin whose shared copy would expire before half its TTL is
    left is queued in `outbox` for the background writer, so a conversation in use stays
    shared without a write per request.
    """

    __slots__ = ("_pins", "max_size", "outbox", "on_repin")

    def __init__(self, max_size: int = MAX_PINS) -> None:
        # (model, key) -> [deployment key, expires, shared until, ttl]
        self._pins: OrderedDict[tuple[str, str], list[Any]] = OrderedDict()
        self.max_size = max_size
        self.outbox: dict[tuple[str, str], tuple[Any, float, float]] = {}  # to share: (deployment, expires, ttl)
        self.on_repin: Callable[[str], None] | None = None  # the metric (set by the composition root)

    def __len__(self) -> int:
        return len(self._pins)

    def get(self, model: str, key: str, now: float) -> Any | None:
        """The pinned deployment key, renewed for another TTL; None when there is none alive."""
        pin = self._pins.get((model, key))
        if pin is None:
            return None
        if pin[1] <= now:
            del self._pins[(model, key)]
            return None
        self._pins.move_to_end((model, key))
        pin[1] = now + pin[3]
        if pin[2] - now < pin[3] / 2:
            self._share((model, key), pin)
        return pin[0]

    def put(self, model: str, key: str, deployment: Any, ttl_s: float, now: float) -> None:
        """Pin the conversation to `deployment` for `ttl_s`; counts a re-pin when it moves a live pin."""
        here = (model, key)
        old = self._pins.get(here)
        if old is not None:
            if old[0] == deployment:
                old[1] = now + ttl_s
                return
            if old[1] > now and self.on_repin is not None:
                self.on_repin(model)
        pin = [deployment, now + ttl_s, 0.0, ttl_s]
        self._pins[here] = pin
        self._pins.move_to_end(here)
        self._share(here, pin)
        if len(self._pins) > self.max_size:
            self._pins.popitem(last=False)

    def _share(self, here: tuple[str, str], pin: list[Any]) -> None:
        outbox = self.outbox
        if here not in outbox and len(outbox) >= _OUTBOX_MAX:
            return
        pin[2] = pin[1]
        outbox[here] = (pin[0], pin[1], pin[3])

    def merge(self, model: str, key: str, deployment: Any, expires: float, ttl_s: float) -> None:
        """A pin another process shared (or this one before a restart), the conversation's latest move: it
        replaces this process's pin (the later expiry kept for the same deployment). Not shared again."""
        here = (model, key)
        old = self._pins.get(here)
        if old is not None and old[0] == deployment:
            old[1] = max(old[1], expires)
            return
        self._pins[here] = [deployment, expires, expires, ttl_s]
        if len(self._pins) > self.max_size:
            self._pins.popitem(last=False)

    def take_outbox(self) -> dict[tuple[str, str], tuple[Any, float, float]]:
        """The pins to share now (the background writer's round); the outbox starts empty again."""
        out, self.outbox = self.outbox, {}
        return out

    def clear(self) -> None:
        self._pins.clear()
        self.outbox = {}
