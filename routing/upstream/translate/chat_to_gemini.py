"""Chat Completions client -> Gemini `generateContent` upstream (the gemini dialect, and Google models on vertex).

docs/providers.md#gemini lists what is translated and what is not. Requests: system and
developer messages become `systemInstruction`; user turns `user` contents, assistant
turns `model` contents (tool calls as `functionCall` parts), tool messages
`functionResponse` parts (named after the call they answer); image parts `inlineData`
(data: URLs) or `fileData` (other URLs); function tools `functionDeclarations`;
sampling fields `generationConfig`; `response_format` and `reasoning_effort` are
gemini_structured's (docs/translation.md#gemini). Answers: text and `functionCall` parts
become the message and its tool calls, thought parts (`thought: true`) its
`reasoning_content`, `finishReason` the finish_reason (safety stops: `content_filter`),
`usageMetadata` the usage with its cached and reasoning tokens. A prompt blocked by
`promptFeedback.blockReason` is a content-filter refusal: a client error, never a breaker failure.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import orjson

from routing.config.snapshot import ModelSpec
from routing.core.errors import invalid_request
from routing.core.failures import FailureKind, UpstreamFailure
from routing.core.sse import DONE, data_frame, normalise, pop_events
from routing.upstream.translate import gemini_structured, openai_request
from routing.upstream.translate.shared import chat_gaps, usage_object

FINISH_REASONS = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
}
_CONFIG = {
    "temperature": "temperature",
    "top_p": "topP",
    "top_k": "topK",
    "n": "candidateCount",
    "seed": "seed",
    "presence_penalty": "presencePenalty",
    "frequency_penalty": "frequencyPenalty",
}


def _parts(content: Any, param: str) -> list[dict[str, Any]]:
    """User/assistant content (string or OpenAI parts) as Gemini parts."""
    parts: list[dict[str, Any]] = []
    for i, part in enumerate(openai_request.content_list(content, param)):
        p = f"{param}[{i}]"
        if isinstance(part, str):
            parts.append({"text": part})
        elif isinstance(part, dict) and part.get("type") == "text":
            parts.append({"text": str(part.get("text", ""))})
        elif isinstance(part, dict) and part.get("type") == "image_url":
            parts.append(_image_part(part, p))
        else:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise invalid_request(f"{p}: content part type {kind!r} is not supported by Gemini models", p)
    return parts


def _image_part(part: dict[str, Any], param: str) -> dict[str, Any]:
    media_type, data = openai_request.image_source(part, param)
    if media_type is not None:
        return {"inlineData": {"mimeType": media_type, "data": data}}
    ext = data.rsplit("?", 1)[0].rsplit(".", 1)[-1].lower()
    mime = {"png": "image/png", "webp": "image/webp", "gif": "image/gif"}.get(ext, "image/jpeg")
    return {"fileData": {"mimeType": mime, "fileUri": data}}


def _append(contents: list[dict[str, Any]], role: str, parts: list[dict[str, Any]]) -> None:
    """Add a turn, merging with the previous one of the same role (Gemini alternates roles)."""
    if not parts:
        return
    if contents and contents[-1]["role"] == role:
        contents[-1]["parts"].extend(parts)
    else:
        contents.append({"role": role, "parts": parts})


def thought_signature_of(call: Any) -> str | None:
    """The thought signature a tool call carried back in `extra_content.google.thought_signature`
    (the field Google's own OpenAI-compatible endpoint uses; chat_completion_of sets it)."""
    extra = call.get("extra_content") if isinstance(call, dict) else None
    google = extra.get("google") if isinstance(extra, dict) else None
    signature = google.get("thought_signature") if isinstance(google, dict) else None
    return signature if isinstance(signature, str) and signature else None


def contents_of(raw: Any) -> tuple[str | None, list[dict[str, Any]]]:
    """(system instruction text, contents) of OpenAI chat messages."""
    names: dict[str, str] = {}  # tool call id -> function name, for the functionResponse that answers it

    def call_part(call: Any, param: str) -> dict[str, Any]:
        call_id, name, args = openai_request.function_call(call, param)
        names[call_id] = name
        part: dict[str, Any] = {"functionCall": {"name": name, "args": args}}
        signature = thought_signature_of(call)
        if signature is not None:
            part["thoughtSignature"] = signature  # Gemini 3 refuses a call of its own turn without it
        return part

    def result_part(msg: dict[str, Any], text: str) -> dict[str, Any]:
        name = names.get(str(msg.get("tool_call_id", "")), str(msg.get("name") or "tool"))
        return {"functionResponse": {"name": name, "response": {"content": text}}}

    system, turns = openai_request.chat_turns(raw, _parts, call_part, result_part)
    contents: list[dict[str, Any]] = []
    for role, parts in turns:
        _append(contents, "model" if role == "assistant" else "user", parts)
    return system, contents


def _tools(tools: Any) -> list[dict[str, Any]]:
    declarations = []
    for fn in openai_request.function_tools(tools):
        decl: dict[str, Any] = {"name": fn["name"]}
        if fn.get("description"):
            decl["description"] = fn["description"]
        if fn.get("parameters"):
            decl["parameters"] = fn["parameters"]
        declarations.append(decl)
    return [{"functionDeclarations": declarations}]


def _tool_config(choice: Any) -> dict[str, Any] | None:
    read = openai_request.tool_choice_of(choice)
    if read is None:
        return None
    if read[0] == "function":
        return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [str(read[1])]}}
    mode = {"auto": "AUTO", "none": "NONE", "required": "ANY"}[read[0]]
    return {"functionCallingConfig": {"mode": mode}}


def _generation_config(body: dict[str, Any]) -> dict[str, Any]:
    config = {target: body[name] for name, target in _CONFIG.items() if body.get(name) is not None}
    max_tokens = openai_request.max_tokens_of(body)
    if max_tokens is not None:
        config["maxOutputTokens"] = max_tokens
    stop = body.get("stop")
    if stop:
        config["stopSequences"] = openai_request.stop_sequences(stop)
    return config


def gaps(body: dict[str, Any], model: ModelSpec) -> tuple[str, ...]:
    """The chat hints this link drops (for x-switchboard-dropped); a 400 for the fields it cannot give.

    Gemini takes `n` (candidateCount) and `seed`; its logprobs are not read back into the answer, and it has no
    end-user id and no switch against parallel function calls."""
    return chat_gaps(body, model.id, model.provider.dialect, ("logprobs",), ("user", "parallel_tool_calls"))


def gemini_request(body: dict[str, Any], model: ModelSpec | None = None) -> dict[str, Any]:
    """The generateContent body for an OpenAI chat body (structured output and reasoning:
    gemini_structured, within the range of `model`, the serving model)."""
    system, contents = contents_of(body.get("messages"))
    out: dict[str, Any] = {"contents": contents}
    if system:
        out["systemInstruction"] = {"parts": [{"text": system}]}
    if body.get("tools"):
        out["tools"] = _tools(body["tools"])
        config = _tool_config(body.get("tool_choice"))
        if config is not None:
            out["toolConfig"] = config
    generation = _generation_config(body)
    upstream, model_id = (model.upstream_model, model.id) if model is not None else ("", "")
    dialect = model.provider.dialect if model is not None else "gemini"
    limit = model.max_output_tokens if model is not None else None
    gemini_structured.apply(body, generation, upstream, model_id, dialect, limit)
    if generation:
        out["generationConfig"] = generation
    return out


# --- answers -----------------------------------------------------------------------


def gemini_usage(raw: Any) -> tuple[int | None, int | None, dict[str, Any] | None]:
    """(prompt, completion, OpenAI usage) of `usageMetadata`; thinking tokens count as completion."""
    if not isinstance(raw, dict):
        return None, None, None
    prompt = raw.get("promptTokenCount")
    out = raw.get("candidatesTokenCount")
    thoughts = raw.get("thoughtsTokenCount")
    prompt = prompt if type(prompt) is int else None
    completion = (out if type(out) is int else 0) + (thoughts if type(thoughts) is int else 0)
    completion_or_none = completion if (type(out) is int or type(thoughts) is int) else None
    cached = raw.get("cachedContentTokenCount")
    usage = usage_object(prompt, completion, cached if type(cached) is int else 0)
    if type(thoughts) is int and thoughts:
        usage["completion_tokens_details"] = {"reasoning_tokens": thoughts}
    return prompt, completion_or_none, usage


def blocked(data: dict[str, Any], model: ModelSpec, body: bytes) -> UpstreamFailure | None:
    """The content-filter refusal of a prompt Gemini blocked (no candidates, a blockReason)."""
    feedback = data.get("promptFeedback")
    reason = feedback.get("blockReason") if isinstance(feedback, dict) else None
    if reason and not data.get("candidates"):
        message = f"the provider of {model.id} blocked the prompt ({reason}): rephrase the request"
        return UpstreamFailure(FailureKind.CONTENT_FILTER, message, 400, None, _filter_error(message))
    return None


def _filter_error(message: str) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": "invalid_request_error", "code": "content_filter"}})


def _candidate(data: dict[str, Any]) -> dict[str, Any]:
    candidates = data.get("candidates")
    first = candidates[0] if isinstance(candidates, list) and candidates else None
    return first if isinstance(first, dict) else {}


def _read_parts(candidate: dict[str, Any], first_call: int) -> tuple[str, str, list[dict[str, Any]]]:
    """(text, thoughts, OpenAI tool calls) of a candidate's parts; a thought part's text is reasoning."""
    content = candidate.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for part in parts if isinstance(parts, list) else ():
        if not isinstance(part, dict):
            continue
        if part.get("thought"):
            if isinstance(part.get("text"), str):
                thoughts.append(part["text"])
            continue
        if isinstance(part.get("text"), str):
            texts.append(part["text"])
        call = part.get("functionCall")
        if isinstance(call, dict):
            out: dict[str, Any] = {
                "id": str(call.get("id") or f"call_{first_call + len(calls)}"),
                "type": "function",
                "function": {
                    "name": str(call.get("name", "")),
                    "arguments": orjson.dumps(call.get("args") or {}).decode(),
                },
            }
            if isinstance(part.get("thoughtSignature"), str):  # carried back with the call (thought_signature_of)
                out["extra_content"] = {"google": {"thought_signature": part["thoughtSignature"]}}
            calls.append(out)
    return "".join(texts), "".join(thoughts), calls


def _finish(candidate: dict[str, Any], has_calls: bool) -> str | None:
    reason = candidate.get("finishReason")
    if not reason:
        return None
    if has_calls and reason == "STOP":
        return "tool_calls"
    return FINISH_REASONS.get(reason, "stop")


def chat_completion_of(data: dict[str, Any], model: ModelSpec, body: bytes) -> tuple[dict[str, Any], Any, Any]:
    """(chat.completion, prompt tokens, completion tokens) of a generateContent answer."""
    refusal = blocked(data, model, body)
    if refusal is not None:
        raise refusal
    candidate = _candidate(data)
    text, thoughts, calls = _read_parts(candidate, 0)
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if thoughts:
        message["reasoning_content"] = thoughts
    if calls:
        message["tool_calls"] = calls
    prompt, completion, usage = gemini_usage(data.get("usageMetadata"))
    out: dict[str, Any] = {
        "id": str(data.get("responseId") or ""),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": data.get("modelVersion") or model.upstream_model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _finish(candidate, bool(calls)) or "stop",
            }
        ],
    }
    if usage is not None:
        out["usage"] = usage
    return out, prompt, completion


def _chunk(head: dict[str, Any], delta: dict[str, Any], finish: str | None, usage: Any = None) -> bytes:
    chunk = {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    if usage is not None:
        chunk["usage"] = usage
    return data_frame(orjson.dumps(chunk))


def _error_frame(message: str, code: str = "upstream_stream_error") -> bytes:
    payload = {"error": {"message": message, "type": "upstream_error", "code": code, "param": None}}
    return data_frame(orjson.dumps(payload))


async def translate_sse(chunks: AsyncIterator[bytes], model: ModelSpec) -> AsyncIterator[bytes]:
    """`streamGenerateContent?alt=sse` events -> chat.completion.chunk frames and `[DONE]`.

    Each event is a whole GenerateContentResponse: its text is a content delta, its
    function calls complete tool-call deltas. The event carrying `finishReason` ends the
    choice; the finish chunk carries the usage of the last `usageMetadata`. Gemini sends
    no terminator, so `[DONE]` follows the upstream's clean end after a finish reason; a
    stream cut before one ends without `[DONE]` (the stream layer reports it).
    """
    head = {"id": "", "object": "chat.completion.chunk", "created": int(time.time()), "model": model.upstream_model}
    buffer = bytearray()
    role = {"role": "assistant"}
    calls = 0
    finish: str | None = None
    usage: Any = None
    async for chunk in chunks:
        normalise(buffer, chunk)
        for _, payload in pop_events(buffer):
            try:
                data = orjson.loads(payload)
            except orjson.JSONDecodeError:
                yield _error_frame("the upstream sent an SSE event that is not JSON")
                return
            if not isinstance(data, dict):
                continue
            if isinstance(data.get("error"), dict):
                yield _error_frame(str(data["error"].get("message") or "the upstream stream reported an error"))
                return
            if blocked(data, model, b"") is not None:
                yield _error_frame(f"the provider of {model.id} blocked the prompt", "content_filter")
                return
            head["id"] = head["id"] or str(data.get("responseId") or "")
            _, _, seen = gemini_usage(data.get("usageMetadata"))
            usage = seen or usage
            candidate = _candidate(data)
            text, thoughts, new_calls = _read_parts(candidate, calls)
            delta: dict[str, Any] = dict(role)
            if thoughts:
                delta["reasoning_content"] = thoughts
            if text:
                delta["content"] = text
            if new_calls:
                delta["tool_calls"] = [{"index": calls + i, **call} for i, call in enumerate(new_calls)]
                calls += len(new_calls)
            if text or thoughts or new_calls:
                yield _chunk(head, delta, None)
                role = {}
            reason = _finish(candidate, calls > 0)
            if reason is not None:
                finish = reason
    if finish is not None:
        yield _chunk(head, dict(role), finish, usage)
        yield DONE
