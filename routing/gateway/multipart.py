"""The multipart/form-data body reader an endpoint row selects with `reader="multipart"` (routing.core.endpoints;
docs/request-validation.md#multipart).

Uploads (audio to transcribe, files, images to edit) come as forms. The body is read whole
first, within the gateway's body limit (routing.gateway.wire.read_body), so this reader only
splits bytes already in memory: no temporary files, no streaming parser. Its own bounds keep
a form from costing more than its size says: at most `parts` parts, each part's headers at
most `header_bytes`, a text field at most `field_bytes`, a file at most `file_bytes`.

The form becomes the body the rest of the request path reads, a dict: each text field its
string (a name sent more than once: the list of its values, in order), each file an `Upload`.
A malformed form is a 400 `invalid_request`, a part or a count over its bound a 413
`request_too_large` (the one catalogue, routing.core.errors); nothing is sent upstream.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from routing.core import errors
from routing.core.forms import Upload

_MAX_BOUNDARY = 70  # RFC 2046 §5.1.1
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_PARAM = re.compile(rf';\s*({_TOKEN})\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;\s]*))')
_ESCAPED = re.compile(r"\\(.)")


@dataclass(frozen=True, slots=True)
class FormLimits:
    """The bounds of one form, beside the body limit that bounds the whole of it."""

    parts: int = 64
    header_bytes: int = 8 * 1024
    field_bytes: int = 64 * 1024
    file_bytes: int | None = None  # None: the body limit alone bounds a file


DEFAULT_LIMITS = FormLimits()


def boundary_of(content_type: bytes) -> bytes:
    """The boundary of a `multipart/form-data` Content-Type, or 400 saying what is wrong with it."""
    text = content_type.decode("latin-1")
    kind, _, params = text.partition(";")
    if kind.strip().lower() != "multipart/form-data":
        raise errors.invalid_form(f"the Content-Type is {kind.strip()!r}, not multipart/form-data with a boundary")
    found = _params(";" + params)
    boundary = found.get("boundary", "")
    if not boundary:
        raise errors.invalid_form("the Content-Type names no boundary")
    if len(boundary) > _MAX_BOUNDARY or boundary.endswith(" "):
        raise errors.invalid_form(f"the boundary must be 1 to {_MAX_BOUNDARY} characters, not ending in a space")
    return boundary.encode("latin-1")


def read_form(raw: bytes, content_type: bytes, limits: FormLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    """The form's fields and files as a dict (see the module docstring); 400 or 413 when it cannot be."""
    delimiter = b"--" + boundary_of(content_type)
    at = raw.find(delimiter)
    if at < 0 or (at > 0 and raw[at - 2 : at] != b"\r\n"):  # a preamble ends with a line break
        raise errors.invalid_form("no part begins with the boundary the Content-Type names")
    form: dict[str, Any] = {}
    pos, count = at + len(delimiter), 0
    while not raw.startswith(b"--", pos):  # "--" after a delimiter closes the form; the epilogue is ignored
        line_end = raw.find(b"\r\n", pos)
        if line_end < 0 or raw[pos:line_end].strip(b" \t"):
            raise errors.invalid_form("a boundary line is not followed by a line break, or the form is not closed")
        count += 1
        if count > limits.parts:
            raise errors.form_too_many_parts(limits.parts)
        pos = line_end + 2
        head_end = raw.find(b"\r\n\r\n", pos - 2, pos + limits.header_bytes + 4)
        if head_end < 0:
            raise errors.invalid_form(f"part {count}'s headers do not end within {limits.header_bytes} bytes")
        name, filename, part_type = _disposition(raw[pos:head_end] if head_end >= pos else b"", count)
        end = raw.find(b"\r\n" + delimiter, head_end + 4)
        if end < 0:
            raise errors.invalid_form("the body ends before the form's closing boundary")
        _add(form, name, filename, part_type, raw[head_end + 4 : end], limits)
        pos = end + 2 + len(delimiter)
    return form


def _add(
    form: dict[str, Any], name: str, filename: str | None, part_type: str, data: bytes, limits: FormLimits
) -> None:
    """Put one part into the form, within its bound: a file as an Upload, a field as its text."""
    if filename is not None:
        if limits.file_bytes is not None and len(data) > limits.file_bytes:
            raise errors.form_part_too_large(name, limits.file_bytes)
        value: Any = Upload(filename, part_type or "application/octet-stream", data)
    else:
        if len(data) > limits.field_bytes:
            raise errors.form_part_too_large(name, limits.field_bytes)
        try:
            value = data.decode("utf-8")
        except UnicodeDecodeError:
            raise errors.invalid_form(f"the field '{name}' is not UTF-8 text", name) from None
    before = form.get(name)
    if before is None:
        form[name] = value
    elif isinstance(before, list):
        before.append(value)
    else:
        form[name] = [before, value]


def _disposition(block: bytes, count: int) -> tuple[str, str | None, str]:
    """(name, filename or None, Content-Type) of a part from its header block; 400 without a form-data name."""
    disposition = part_type = ""
    for line in block.decode("utf-8", "replace").split("\r\n"):
        header, colon, value = line.partition(":")
        if not colon:
            raise errors.invalid_form(f"part {count} has a header line without a colon")
        header = header.strip().lower()
        if header == "content-disposition":
            disposition = value.strip()
        elif header == "content-type":
            part_type = value.strip()
    kind, _, params = disposition.partition(";")
    found = _params(";" + params)
    name = found.get("name")
    if kind.strip().lower() != "form-data" or not name:
        raise errors.invalid_form(f"part {count} has no Content-Disposition: form-data with a name")
    return name, found.get("filename"), part_type


def _params(text: str) -> dict[str, str]:
    """`; key=value; key="quoted \\" value"` as a dict, keys lower-cased."""
    found = {}
    for match in _PARAM.finditer(text):
        quoted, bare = match.group(2), match.group(3)
        found[match.group(1).lower()] = _ESCAPED.sub(r"\1", quoted) if quoted is not None else bare
    return found


__all__ = ["DEFAULT_LIMITS", "FormLimits", "Upload", "boundary_of", "read_form"]
