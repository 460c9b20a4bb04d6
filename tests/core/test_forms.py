"""A form written back for an upstream (routing.core.forms.encode_form): the exact bytes an upstream reads,
the same a browser would send for the same form."""

from __future__ import annotations

from routing.core.forms import Upload, encode_form, is_form


def test_each_field_is_a_part_with_numbers_and_booleans_as_their_json_text() -> None:
    body, content_type = encode_form(
        {"model": "whisper-1", "n": 2, "temperature": 0.5, "stream": False, "echo": True, "tags[]": ["a", "b"]},
        boundary="B",
    )
    assert content_type == "multipart/form-data; boundary=B"
    part = '--B\r\nContent-Disposition: form-data; name="{}"\r\n\r\n{}\r\n'
    assert (
        body
        == (
            part.format("model", "whisper-1")
            + part.format("n", "2")
            + part.format("temperature", "0.5")
            + part.format("stream", "false")
            + part.format("echo", "true")
            + part.format("tags[]", "a")
            + part.format("tags[]", "b")
            + "--B--\r\n"
        ).encode()
    )


def test_a_file_name_cannot_break_out_of_its_header() -> None:
    """A quote and a backslash are escaped, a line break percent-encoded as browsers do (RFC 7578 §4.2):
    a client's file name can neither end the parameter nor start a header of its own."""
    upload = Upload('a\\b"c\r\nX-Injected: 1\rd\ne.wav', "audio/wav", b"RIFF\r\n")
    body, _ = encode_form({'fi"le': upload}, boundary="B")
    assert body == (
        b'--B\r\nContent-Disposition: form-data; name="fi\\"le"; '
        b'filename="a\\\\b\\"c%0D%0AX-Injected: 1%0Dd%0Ae.wav"\r\n'
        b"Content-Type: audio/wav\r\n\r\nRIFF\r\n\r\n--B--\r\n"
    )


def test_without_a_boundary_each_form_gets_its_own_random_one() -> None:
    """A fixed boundary could occur in a file's bytes; a fresh random one per form practically cannot."""
    form = {"file": Upload("a.bin", "application/octet-stream", b"\x00")}
    (first, first_type), (_, second_type) = encode_form(form), encode_form(form)
    assert first_type != second_type
    boundary = first_type.removeprefix("multipart/form-data; boundary=")
    assert first.startswith(f"--{boundary}\r\n".encode()) and first.endswith(f"--{boundary}--\r\n".encode())
    assert 20 <= len(boundary) <= 70  # RFC 2046: at most 70 characters


def test_only_a_body_with_a_file_is_a_form() -> None:
    assert is_form({"model": "m", "file": Upload("a", "b", b"")})
    assert not is_form({"model": "m", "input": ["x"], "n": 1})
