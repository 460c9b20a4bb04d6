"""The translation conformance matrix: client protocol x dialect link x feature -> what the gateway does.

One table, test data only (the product never reads it). `test_matrix.py` walks every cell through the
gateway in process against the repo's mock upstream and asserts the observed outcome is the cell's;
`python -m tests.conformance.render` writes it into docs/translation.md#matrix.

A cell is one of:

- `passthrough`: the upstream speaks the client's protocol and got the field as sent;
- `translated`: the upstream got the field's counterpart in its own protocol;
- `refused:<param>`: 400 naming `<param>`, nothing sent upstream;
- `dropped-hint:<field>`: 200, the upstream got nothing for it, `x-switchboard-dropped` names it;
- `n/a`: the client's protocol has no such field;
- `silently dropped`: 200, the upstream got nothing for it and no header says so. A defect; no cell
  may hold it (`test_no_cell_is_silently_dropped`).
"""

from __future__ import annotations

PASS = "passthrough"
XLATE = "translated"
NA = "n/a"
SILENT = "silently dropped"
HINT = "dropped-hint:top_logprobs"  # a Responses client's, on a translated link
# hints OpenAI's reference calls best effort, dropped where the upstream has no counterpart
SEED = "dropped-hint:seed"
USER = "dropped-hint:user"
PARALLEL = "dropped-hint:parallel_tool_calls"  # Gemini and Converse cannot forbid parallel calls
# what the chat client relies on in the answer, refused where the upstream cannot give it
N = "refused:n"
LOGPROBS = "refused:logprobs"

# the dialect links, in the order of each row's cells (tests/conformance/walk.py LINKS)
COLUMNS = ("openai", "azure_openai", "anthropic", "gemini", "vertex-gemini", "vertex-claude", "bedrock", "ollama")

# client protocol -> feature -> one cell per column
MATRIX: dict[str, dict[str, tuple[str, ...]]] = {
    "chat": {
        "tools": (PASS, PASS, XLATE, XLATE, XLATE, XLATE, XLATE, PASS),
        "tool_choice named": (PASS, PASS, XLATE, XLATE, XLATE, XLATE, XLATE, PASS),
        "parallel tool calls": (PASS, PASS, XLATE, PARALLEL, PARALLEL, XLATE, PARALLEL, PASS),
        "images data URI": (PASS, PASS, XLATE, XLATE, XLATE, XLATE, XLATE, PASS),
        "images by URL": (PASS, PASS, XLATE, XLATE, XLATE, XLATE, "refused:messages[0].content", PASS),
        "structured output json_schema": (PASS, PASS, XLATE, XLATE, XLATE, XLATE, XLATE, PASS),
        "json_object": (PASS, PASS, XLATE, XLATE, XLATE, XLATE, XLATE, PASS),
        "reasoning effort/thinking": (PASS, PASS, XLATE, XLATE, XLATE, XLATE, XLATE, PASS),
        "stop sequences": (PASS, PASS, XLATE, XLATE, XLATE, XLATE, XLATE, PASS),
        "n": (PASS, PASS, N, XLATE, XLATE, N, N, PASS),
        "logprobs": (PASS, PASS, LOGPROBS, LOGPROBS, LOGPROBS, LOGPROBS, LOGPROBS, PASS),
        "seed": (PASS, PASS, SEED, XLATE, XLATE, SEED, SEED, PASS),
        "user/metadata": (PASS, PASS, XLATE, USER, USER, XLATE, USER, PASS),
        "streaming": (PASS, PASS, XLATE, XLATE, XLATE, XLATE, XLATE, PASS),
        "reasoning content back": (PASS, PASS, XLATE, XLATE, XLATE, XLATE, XLATE, PASS),
        "usage: cached tokens back": (PASS, PASS, XLATE, XLATE, XLATE, XLATE, XLATE, PASS),
    },
    "responses": {
        "tools": (XLATE, XLATE, XLATE, XLATE, XLATE, XLATE, XLATE, XLATE),
        "tool_choice named": (XLATE, XLATE, XLATE, XLATE, XLATE, XLATE, XLATE, XLATE),
        "parallel tool calls": (XLATE, XLATE, XLATE, PARALLEL, PARALLEL, XLATE, PARALLEL, XLATE),
        "images data URI": (XLATE, XLATE, XLATE, XLATE, XLATE, XLATE, XLATE, XLATE),
        "images by URL": (XLATE, XLATE, XLATE, XLATE, XLATE, XLATE, "refused:messages[0].content", XLATE),
        "structured output json_schema": (XLATE, XLATE, XLATE, XLATE, XLATE, XLATE, XLATE, XLATE),
        "json_object": (XLATE, XLATE, XLATE, XLATE, XLATE, XLATE, XLATE, XLATE),
        "reasoning effort/thinking": (XLATE, XLATE, XLATE, XLATE, XLATE, XLATE, XLATE, XLATE),
        "stop sequences": (NA, NA, NA, NA, NA, NA, NA, NA),
        "n": (NA, NA, NA, NA, NA, NA, NA, NA),
        "logprobs": (HINT, HINT, HINT, HINT, HINT, HINT, HINT, HINT),
        "seed": (NA, NA, NA, NA, NA, NA, NA, NA),
        "user/metadata": (XLATE, XLATE, XLATE, USER, USER, XLATE, USER, XLATE),
        "streaming": (XLATE, XLATE, XLATE, XLATE, XLATE, XLATE, XLATE, XLATE),
        "reasoning content back": (XLATE, XLATE, XLATE, XLATE, XLATE, XLATE, XLATE, XLATE),
        "usage: cached tokens back": (XLATE, XLATE, XLATE, XLATE, XLATE, XLATE, XLATE, XLATE),
    },
    "messages": {
        "tools": (XLATE, XLATE, PASS, XLATE, XLATE, PASS, XLATE, XLATE),
        "tool_choice named": (XLATE, XLATE, PASS, XLATE, XLATE, PASS, XLATE, XLATE),
        "parallel tool calls": (XLATE, XLATE, PASS, PARALLEL, PARALLEL, PASS, PARALLEL, XLATE),
        "images data URI": (XLATE, XLATE, PASS, XLATE, XLATE, PASS, XLATE, XLATE),
        "images by URL": (XLATE, XLATE, PASS, XLATE, XLATE, PASS, "refused:messages[0].content", XLATE),
        "structured output json_schema": (
            "refused:output_format",
            "refused:output_format",
            PASS,
            "refused:output_format",
            "refused:output_format",
            PASS,
            "refused:output_format",
            "refused:output_format",
        ),
        "json_object": (NA, NA, NA, NA, NA, NA, NA, NA),
        "reasoning effort/thinking": (XLATE, XLATE, PASS, XLATE, XLATE, PASS, XLATE, XLATE),
        "stop sequences": (XLATE, XLATE, PASS, XLATE, XLATE, PASS, XLATE, XLATE),
        "n": (NA, NA, NA, NA, NA, NA, NA, NA),
        "logprobs": (NA, NA, NA, NA, NA, NA, NA, NA),
        "seed": (NA, NA, NA, NA, NA, NA, NA, NA),
        "user/metadata": (XLATE, XLATE, PASS, USER, USER, PASS, USER, XLATE),
        "streaming": (XLATE, XLATE, PASS, XLATE, XLATE, PASS, XLATE, XLATE),
        "reasoning content back": (XLATE, XLATE, PASS, XLATE, XLATE, PASS, XLATE, XLATE),
        "usage: cached tokens back": (XLATE, XLATE, PASS, XLATE, XLATE, PASS, XLATE, XLATE),
    },
}

# what the matrix does not cover yet (walked by the per-pair tests instead). Two rows are answer-side:
# "reasoning content back" (the upstream's thoughts reach the client's answer) and "usage: cached tokens
# back" (the upstream's cache reads reach the client's usage), both non-streamed
NOT_COVERED = (
    "usage classes other than cache reads: reasoning and cache-write tokens"
    " (tests/gateway/test_translation_clients.py, test_translation_clouds.py)",
    "the stream's frames (tests/gateway/test_clients.py, test_responses_grammar.py): a streaming cell checks"
    " that the upstream was asked to stream and the client got an event stream",
)


def cells() -> list[tuple[str, str, str, str]]:
    """Every cell as (client, link, feature, expected), in the table's order."""
    return [
        (client, link, feature, expected)
        for client, features in MATRIX.items()
        for feature, row in features.items()
        for link, expected in zip(COLUMNS, row, strict=True)
    ]
