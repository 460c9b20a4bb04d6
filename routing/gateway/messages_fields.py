"""The top-level field types of an Anthropic Messages request (docs/anthropic-messages.md#validation).

One table, checked before translation; nested shapes (content blocks, tools, tool_choice)
are checked by the translation in routing.upstream.translate.messages_to_chat as it walks them, so
every wrong type is a 400 naming the field, never a 500.
"""

from __future__ import annotations

from typing import Any

from routing.core.errors import invalid_request

# type name -> accepted Python types (bool is never an integer or a number here)
_TYPES: dict[str, tuple[type, ...]] = {
    "a string": (str,),
    "an integer": (int,),
    "a number": (int, float),
    "a boolean": (bool,),
    "an array": (list,),
    "an object": (dict,),
    "a string or an array of text blocks": (str, list),
}
# (field, type name, required on /v1/messages, required on /v1/messages/count_tokens)
FIELDS: tuple[tuple[str, str, bool, bool], ...] = (
    ("model", "a string", False, False),  # the agent's default model applies when absent
    ("messages", "an array", True, True),
    ("max_tokens", "an integer", True, False),
    ("system", "a string or an array of text blocks", False, False),
    ("stream", "a boolean", False, False),
    ("stop_sequences", "an array", False, False),
    ("temperature", "a number", False, False),
    ("top_p", "a number", False, False),
    ("top_k", "an integer", False, False),
    ("metadata", "an object", False, False),
    ("tools", "an array", False, False),
    ("tool_choice", "an object", False, False),
    ("thinking", "an object", False, False),  # {"type": "enabled", "budget_tokens"} | {"type": "adaptive"} | ...
    ("output_config", "an object", False, False),
    ("context_management", "an object", False, False),
)
# Any other field is kept: a passthrough link forwards it, a translated one drops it as a hint or refuses it
# by name (routing.upstream.translate.messages_to_chat.MAPPED_FIELDS / HINT_FIELDS).
# integer fields with a lower bound
_MINIMUM = {"max_tokens": 1, "top_k": 0}


def check(body: dict[str, Any], count_tokens: bool = False) -> None:
    """Raise 400 invalid_request naming the first field that is missing or of the wrong type."""
    for name, type_name, required, required_counting in FIELDS:
        value = body.get(name)
        if value is None:
            if required_counting if count_tokens else required:
                raise invalid_request(f"The field '{name}' is required; send {type_name}.", name)
            continue
        types = _TYPES[type_name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise invalid_request(f"The field '{name}' must be {type_name}, not {_json_type(value)}.", name)
        minimum = _MINIMUM.get(name)
        if minimum is not None and value < minimum:
            raise invalid_request(f"The field '{name}' must be at least {minimum}.", name)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "null"
