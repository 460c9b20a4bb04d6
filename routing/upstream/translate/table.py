"""The one table of protocol pairs: (client protocol, upstream protocol) -> its translator (docs/translation.md#pairs).

A protocol is a wire API: `chat` (OpenAI Chat Completions, the gateway's internal shape),
`responses` (OpenAI Responses), `messages` (Anthropic Messages), `gemini` (Google's
generateContent) and `converse` (AWS Bedrock's Converse). Which client protocols a link's
upstream speaks itself is routing.core.kinds.NATIVE_PROTOCOLS (through `Dialect.speaks`):
there the pair is (p, p), a pass-through; elsewhere an endpoint's request is translated to
`chat`, and the dialect takes it on from there with its own (chat, upstream) translator.

Each row names the four parts of one direction, each None when the direction has nothing to
do there:

- `request`: the client's body -> the upstream protocol's body (None: sent as the client sent it);
- `answer`: the upstream's whole answer -> the client's (None: relayed as it came);
- `stream`: the upstream's stream bytes -> bytes framed for the commit rule (routing.core.stream),
  before the commit (None: the dialect's own `translate_stream`);
- `tap`: a factory of the tap that turns the committed bytes into the client's and reads their
  usage (routing.gateway.proxy.Tap; None: routing.core.stream.UsageTap).

The gateway picks the row of the /v1/messages and /v1/responses endpoints here
(routing.gateway.messages, routing.gateway.responses); a dialect calls the module of its
(chat, upstream) row itself (its signatures are its upstream's). Adding a pair is its module and its
row; tests/upstream/test_translators.py checks that every `<client>_to_<upstream>` module has its row
and that a row's parts are its module's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from routing.upstream.translate import (
    chat_to_anthropic,
    chat_to_bedrock,
    chat_to_gemini,
    messages_passthrough,
    messages_to_chat,
    responses_passthrough,
    responses_to_chat,
)

CHAT = "chat"  # the internal protocol: every dialect takes a chat request


@dataclass(frozen=True, slots=True)
class Translator:
    """One direction (client protocol -> upstream protocol): a row of TRANSLATORS."""

    request: Callable[..., Any] | None
    answer: Callable[..., Any] | None
    stream: Callable[..., Any] | None
    tap: Callable[[], Any] | None

    @property
    def passthrough(self) -> bool:
        """Whether the client's body goes up as sent and the answer comes back as sent."""
        return self.request is None


TRANSLATORS: dict[tuple[str, str], Translator] = {
    # a chat client on an upstream that speaks another protocol: read by that upstream's dialect
    ("chat", "messages"): Translator(
        chat_to_anthropic.anthropic_request, chat_to_anthropic.chat_completion_of, chat_to_anthropic.translate_sse, None
    ),
    ("chat", "gemini"): Translator(
        chat_to_gemini.gemini_request, chat_to_gemini.chat_completion_of, chat_to_gemini.translate_sse, None
    ),
    ("chat", "converse"): Translator(
        chat_to_bedrock.converse_request, chat_to_bedrock.chat_completion_of, chat_to_bedrock.translate_events, None
    ),
    # /v1/messages (routing.gateway.messages)
    ("messages", "messages"): Translator(
        None, None, messages_passthrough.held_until_content, messages_passthrough.AnthropicRelay
    ),
    ("messages", "chat"): Translator(
        messages_to_chat.chat_request, messages_to_chat.message_of, None, messages_to_chat.MessagesStream
    ),
    # /v1/responses (routing.gateway.responses)
    ("responses", "responses"): Translator(
        None, None, responses_passthrough.held_until_content, responses_passthrough.ResponsesRelay
    ),
    ("responses", "chat"): Translator(
        responses_to_chat.chat_request, responses_to_chat.response_of, None, responses_to_chat.ResponsesEvents
    ),
}


def translator(client: str, native: bool) -> Translator:
    """The row for a `client` protocol request on a link whose upstream speaks it (`native`: the
    pass-through) or not (the translation to chat, which the link's dialect takes on)."""
    return TRANSLATORS[(client, client if native else CHAT)]
