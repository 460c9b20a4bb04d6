"""Server-sent events framing, written once: splitting a byte stream into frames, reading a frame, writing one.

Every stream the gateway reads or writes is SSE (text/event-stream): OpenAI's chunks
(`data: {...}`), Anthropic's and Responses' named events (`event: x` / `data: {...}`).
The commit rule (routing.core.stream), every translation between protocols
(routing.upstream.translate) and the pass-through relays frame them here, so a line end,
a split `\\r\\n` or a multi-line `data:` is read the same way everywhere.

Reading: `normalise` appends a chunk to a buffer with its line ends made `\\n`;
`pop_frames` / `pop_events` take the complete frames out of it; `parse_frame` reads one
frame's event name and joined data. Writing: `data_frame`, `event_frame` (bytes already
encoded) and `json_event` (an object, encoded with orjson).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"  # OpenAI's end-of-stream marker (and the relays' "ended as it should")
FRAME_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


def data_frame(payload: bytes) -> bytes:
    """One unnamed frame carrying `payload` (already encoded) as its one `data:` line."""
    return b"data: " + payload + b"\n\n"


def event_frame(name: bytes, payload: bytes) -> bytes:
    """One named frame: `event: name`, then `payload` (already encoded) as its `data:` line."""
    return b"event: " + name + b"\ndata: " + payload + b"\n\n"


def json_event(name: str, data: dict[str, Any]) -> bytes:
    """A named frame whose data is `data` as JSON (Anthropic's and Responses' events)."""
    return event_frame(name.encode(), orjson.dumps(data))


def parse_frame(frame: bytes) -> tuple[bytes | None, bytes | None]:
    """(event name, joined `data:` lines) of one frame with `\\n` line ends, its blank line excluded.

    Either is None when the frame has no such line; comments and other fields are skipped.
    """
    name = None
    data = []
    for line in frame.split(b"\n"):
        if line.startswith(b"data:"):
            data.append(line[5:].lstrip(b" "))
        elif line.startswith(b"event:"):
            name = line[6:].strip()
    return name, (b"\n".join(data) if data else None)


def normalise(buffer: bytearray, chunk: bytes) -> None:
    """Append `chunk` with its line ends made \\n, even when a \\r\\n is split across chunks."""
    buffer += chunk
    if b"\r" in buffer:
        data = bytes(buffer)
        held = data.endswith(b"\r")  # may be the first half of \r\n
        data = (data[:-1] if held else data).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buffer[:] = data + b"\r" if held else data


def pop_frames(buffer: bytearray) -> Iterator[tuple[bytes, bytes | None, bytes | None]]:
    """Pop the complete SSE frames of a (normalised) buffer, one at a time: (raw frame, event name, joined data).

    A generator: each frame is taken out of the buffer and read when the caller asks for it, so a
    translator can send its first event before it has read the rest of a burst (an upstream faster
    than the gateway hands over much of its stream in one read). Frames a caller does not ask for
    stay in the buffer. The buffer must not be appended to while a loop over it is running.
    """
    while True:
        end = buffer.find(b"\n\n")
        if end < 0:
            return
        raw = bytes(buffer[: end + 2])
        del buffer[: end + 2]
        name, data = parse_frame(raw[:-2])
        if data is not None or name:
            yield raw, name, data


def pop_events(buffer: bytearray) -> Iterator[tuple[bytes | None, bytes]]:
    """Pop the complete SSE events that carry data, one at a time: (event name, joined `data:` payload)."""
    for _, name, data in pop_frames(buffer):
        if data is not None:
            yield name, data


def event_name(name: bytes | None, data: bytes | None) -> bytes:
    """The event's name: its `event:` line, else its data's `type` (b"" when it has neither)."""
    if name is not None or data is None:
        return name or b""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return b""
    kind = obj.get("type") if isinstance(obj, dict) else None
    return kind.encode() if isinstance(kind, str) else b""


def complete_end(data: bytes) -> int:
    """Where the last complete SSE frame of `data` ends (0: none). A C-level search for the
    usual `\\n\\n`; the regex only for CR line ends."""
    if b"\r" not in data:
        end = data.rfind(b"\n\n")
        return end + 2 if end >= 0 else 0
    end = 0
    for match in FRAME_END.finditer(data):
        end = match.end()
    return end
