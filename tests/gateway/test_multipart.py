"""The multipart/form-data body reader (routing.gateway.multipart): real forms in, fields and files out,
every malformed or oversized form refused from the one error catalogue."""

from __future__ import annotations

from typing import cast

import httpx
import pytest
from urllib3.filepost import encode_multipart_formdata

from routing.config.snapshot import ModelSpec
from routing.core.errors import CATALOGUE, GatewayError
from routing.gateway.multipart import FormLimits, Upload, boundary_of, read_form
from routing.upstream.dialects import get_dialect


def encoded(data: dict, files: dict) -> tuple[bytes, bytes]:
    """(body, Content-Type) exactly as urllib3 (requests' encoder, a real client's) encodes the form."""
    fields = [(name, v) for name, value in data.items() for v in (value if isinstance(value, list) else [value])]
    body, content_type = encode_multipart_formdata([*fields, *files.items()])
    return body, content_type.encode()


def refused(raw: bytes, content_type: bytes, limits: FormLimits | None = None) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        read_form(raw, content_type, limits or FormLimits())
    assert CATALOGUE[info.value.code][0] == info.value.status  # a code of the one catalogue, its status
    return info.value


def test_a_real_clients_form_gives_its_fields_and_files() -> None:
    raw, content_type = encoded(
        {"model": "whisper-1", "language": "fr", "timestamp_granularities[]": ["word", "segment"]},
        {"file": ("speech é.wav", b"RIFF\x00\x01binary\r\n--not-a-boundary", "audio/wav")},
    )
    form = read_form(raw, content_type)
    assert form["model"] == "whisper-1"
    assert form["language"] == "fr"
    assert form["timestamp_granularities[]"] == ["word", "segment"]  # a repeated name: its values in order
    assert form["file"] == Upload("speech é.wav", "audio/wav", b"RIFF\x00\x01binary\r\n--not-a-boundary")


def test_quoted_boundary_and_a_file_without_a_type() -> None:
    raw = (
        b'--a b\r\nContent-Disposition: form-data; name="f"; filename="x.bin"\r\n\r\n\x00\x01\r\n'
        b'--a b\r\nContent-Disposition: form-data; name="n"\r\n\r\n\r\n--a b--\r\n'
    )
    form = read_form(raw, b'multipart/form-data; boundary="a b"')
    assert form == {"f": Upload("x.bin", "application/octet-stream", b"\x00\x01"), "n": ""}


@pytest.mark.parametrize(
    "content_type",
    [b"multipart/form-data", b"multipart/form-data; charset=utf-8", b'multipart/form-data; boundary=""'],
)
def test_a_form_without_a_boundary_is_a_400_saying_so(content_type: bytes) -> None:
    raw, _ = encoded({"model": "m"}, {})
    error = refused(raw, content_type)
    assert (error.status, error.code) == (400, "invalid_request")
    assert "boundary" in error.message


def test_a_json_content_type_is_not_a_form() -> None:
    error = refused(b"{}", b"application/json")
    assert error.status == 400 and "multipart/form-data" in error.message


def test_a_boundary_over_70_characters_is_refused() -> None:
    assert boundary_of(b"multipart/form-data; boundary=" + b"x" * 70) == b"x" * 70
    assert refused(b"", b"multipart/form-data; boundary=" + b"x" * 71).status == 400


def test_an_oversize_file_or_field_is_a_413_naming_the_part() -> None:
    raw, content_type = encoded({"model": "m"}, {"file": ("a.wav", b"x" * 101, "audio/wav")})
    error = refused(raw, content_type, FormLimits(file_bytes=100))
    assert (error.status, error.code, error.param) == (413, "request_too_large", "file")
    assert "100 bytes" in error.message
    read_form(raw, content_type, FormLimits(file_bytes=101))  # at the bound: read
    raw, content_type = encoded({"prompt": "y" * 65}, {})
    error = refused(raw, content_type, FormLimits(field_bytes=64))
    assert (error.status, error.param) == (413, "prompt")


def test_too_many_parts_is_a_413() -> None:
    raw, content_type = encoded({f"f{i}": "v" for i in range(5)}, {})
    assert len(read_form(raw, content_type, FormLimits(parts=5))) == 5
    error = refused(raw, content_type, FormLimits(parts=4))
    assert (error.status, error.code) == (413, "request_too_large")
    assert "more than 4 parts" in error.message


def test_part_headers_longer_than_their_bound_are_refused() -> None:
    raw, content_type = encoded({"model": "m"}, {})
    assert refused(raw, content_type, FormLimits(header_bytes=20)).status == 400


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b'--B\r\nContent-Disposition: form-data; name="a"\r\n\r\nvalue', "closing boundary"),  # cut short
        (b"no boundary anywhere", "no part begins"),
        (b"--B\r\nContent-Type: text/plain\r\n\r\nv\r\n--B--", "Content-Disposition"),
        (b'--B\r\nContent-Disposition: attachment; name="a"\r\n\r\nv\r\n--B--', "Content-Disposition"),
        (b"--B\r\nno colon here\r\n\r\nv\r\n--B--", "without a colon"),
        (b'--B\r\nContent-Disposition: form-data; name="a"\r\n\r\n\xff\xfe\r\n--B--', "not UTF-8"),
        (b'--Bjunk\r\nContent-Disposition: form-data; name="a"\r\n\r\nv\r\n--B--', "line break"),
    ],
)
def test_a_malformed_form_is_a_400_saying_where(raw: bytes, says: str) -> None:
    error = refused(raw, b"multipart/form-data; boundary=B")
    assert (error.status, error.code) == (400, "invalid_request")
    assert says in error.message


def test_a_preamble_and_an_epilogue_are_ignored() -> None:
    raw = b'preamble\r\n--B\r\nContent-Disposition: form-data; name="a"\r\n\r\nv\r\n--B--\r\nepilogue'
    assert read_form(raw, b"multipart/form-data; boundary=B") == {"a": "v"}


def test_httpx_forms_read_too() -> None:
    request = httpx.Request("POST", "http://gw/v1/x", data={"model": "m"}, files={"file": ("a.png", b"\x89PNG")})
    form = read_form(request.read(), request.headers["content-type"].encode())
    assert form == {"model": "m", "file": Upload("a.png", "image/png", b"\x89PNG")}


def test_a_form_with_files_goes_upstream_as_the_same_form_with_the_upstream_model() -> None:
    """A multipart row's form reaches an OpenAI-compatible upstream as multipart/form-data, every field and
    file as read (a repeated field in order, a quote in a file name escaped), only `model` replaced: read back
    with the gateway's own reader it is the client's form."""
    form = {
        "model": "whisper-alias",
        "file": Upload('say "hi".wav', "audio/wav", b"RIFF\x00\r\n--x\r\nbinary"),
        "timestamp_granularities[]": ["word", "segment"],
        "temperature": "0.2",
    }
    model = type("Model", (), {"upstream_model": "whisper-1"})()
    prepared = get_dialect("openai").build_request(
        "embeddings", form, cast(ModelSpec, model), "http://up.test/v1", "sk-up", False
    )
    content_type = prepared.headers["Content-Type"]
    assert (
        content_type.startswith("multipart/form-data; boundary=")
        and prepared.headers["Authorization"] == "Bearer sk-up"
    )
    assert read_form(prepared.body, content_type.encode()) == {**form, "model": "whisper-1"}


def test_a_form_without_files_keeps_going_upstream_as_json() -> None:
    model = type("Model", (), {"upstream_model": "embed-1"})()
    prepared = get_dialect("openai").build_request(
        "embeddings", {"model": "e", "input": "hi"}, cast(ModelSpec, model), "http://up.test/v1", None, False
    )
    assert (
        prepared.headers["Content-Type"] == "application/json" and prepared.body == b'{"model":"embed-1","input":"hi"}'
    )
