"""A form's files, and the form written back as multipart/form-data for an upstream.

A multipart endpoint row (routing.core.endpoints, `reader="multipart"`) reads its body into a
dict whose files are `Upload`s (routing.gateway.multipart). An upstream that takes forms (audio
transcription, image edits, file uploads) gets the same fields back as a form: `encode_form`
writes them, so a new multipart endpoint needs no encoder of its own. Core, beside the JSON
encoding the dialects use, because both the reader (gateway) and the dialects (upstream) need it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, final


@final
@dataclass(frozen=True, slots=True)
class Upload:
    """One file of a form: its name as the client gave it, its declared type and its bytes."""

    filename: str
    content_type: str
    data: bytes


def is_form(body: dict[str, Any]) -> bool:
    """True when a body read from a form carries a file: it must go upstream as a form, not JSON.

    Every JSON body passes here on its way upstream: the values' types are compared in C (`Upload` is
    final: no subclass to miss), no Python frame per field as a generator would make."""
    return Upload in map(type, body.values())


def _quoted(text: str) -> str:
    """A name for a Content-Disposition parameter: quotes and line breaks escaped (RFC 7578 §4.2)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\r", "%0D").replace("\n", "%0A")


def encode_form(body: dict[str, Any], boundary: str | None = None) -> tuple[bytes, str]:
    """(body bytes, Content-Type) of `body` as multipart/form-data: each text field a part (a list
    its values in order, numbers and booleans as their JSON text), each `Upload` a file part."""
    boundary = boundary or "switchboard-" + secrets.token_hex(12)
    out: list[bytes] = []
    for name, value in body.items():
        for item in value if isinstance(value, list) else [value]:
            head = f'--{boundary}\r\nContent-Disposition: form-data; name="{_quoted(name)}"'
            if isinstance(item, Upload):
                head += f'; filename="{_quoted(item.filename)}"\r\nContent-Type: {item.content_type}'
                data = item.data
            elif isinstance(item, bool):
                data = b"true" if item else b"false"
            else:
                data = str(item).encode()
            out.append(head.encode() + b"\r\n\r\n" + data + b"\r\n")
    out.append(f"--{boundary}--\r\n".encode())
    return b"".join(out), f"multipart/form-data; boundary={boundary}"
