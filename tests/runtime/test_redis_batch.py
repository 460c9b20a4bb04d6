"""The cache's Redis connection (routing.runtime.cache.redis_batch, docs/cache.md#batching), on a real Redis."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from routing.runtime.cache.redis_batch import Batcher, RedisUnavailable, ReplyError, _Wire, pack, parse
from tests.e2e.harness import RedisServer, free_port

ROOT = Path(__file__).resolve().parents[2]


async def test_each_command_gets_its_own_reply_or_its_own_error_and_a_caller_that_left_is_skipped(redis_url):
    batch = Batcher(redis_url)
    key = f"switchboard:test:batch:{uuid.uuid4().hex}"
    try:
        first = batch.call("SET", key, b"1", "PX", 10_000)
        broken = batch.call("EVAL", "return redis.call('NOPE')", 0)
        gone = batch.call("INCR", key)
        gone.cancel()  # its caller stopped waiting before the pass ended: never sent
        read = batch.call("GET", key)
        nested = batch.call("EVAL", "return {1, {ARGV[1], 2}, false}", 0, "é")
        assert await first == b"OK"
        with pytest.raises(ReplyError, match="NOPE|Unknown Redis command"):
            await broken
        assert await read == b"1"  # the INCR was not sent
        assert await nested == [1, ["é".encode(), 2], None]
        await batch.drain()
        assert await batch.run("GET", key) == b"1"  # a later pass, on the same connection
        assert await batch.run("MGET", key, key + ":none") == [b"1", None]
    finally:
        await batch.run("DEL", key)
        await batch.aclose()


async def test_commands_behind_one_on_its_way_leave_in_one_write_and_their_replies_come_back_in_order(redis_url):
    batch = Batcher(redis_url)
    key = f"switchboard:test:batch:{uuid.uuid4().hex}"
    try:
        await batch.run("PING")  # connected
        writes: list[int] = []
        wire = batch._wire
        send = wire.send
        wire.send = lambda data, futures: (writes.append(len(futures)), send(data, futures))
        counts = await asyncio.gather(*(batch.run("INCR", key) for _ in range(50)))
        assert counts == list(range(1, 51))
        assert writes == [1, 49]  # the first at once (nothing else on its way), the rest at the pass's end
    finally:
        await batch.run("DEL", key)
        await batch.aclose()


async def test_an_unreachable_redis_fails_every_command_of_the_pass():
    batch = Batcher(f"redis://127.0.0.1:{free_port()}/0", connect_timeout_s=0.2)
    outcomes = await asyncio.gather(batch.call("GET", "a"), batch.call("SET", "b", b"1"), return_exceptions=True)
    assert [type(o) for o in outcomes] == [RedisUnavailable] * 2, outcomes


async def test_a_redis_restarted_fails_the_commands_on_their_way_and_the_next_one_reconnects():
    server = RedisServer()
    batch = Batcher(server.url)
    try:
        assert await batch.run("SET", "k", b"v") == b"OK"
        server.stop()
        with pytest.raises(RedisUnavailable):
            await asyncio.wait_for(batch.run("GET", "k"), 5)
        server.start()  # empty: it kept nothing
        assert await asyncio.wait_for(batch.run("GET", "k"), 5) is None
    finally:
        await batch.aclose()
        server.stop()


async def test_the_url_s_database_password_and_user_are_used():
    server = RedisServer()
    admin = aioredis.Redis.from_url(server.url)
    try:
        await admin.execute_command("ACL", "SETUSER", "gateway", "on", ">s3cret", "~*", "+@all")
        await admin.config_set("requirepass", "pass")  # the default user's password
        base = f"127.0.0.1:{server.port}"
        by_user = Batcher(f"redis://gateway:s3cret@{base}/3")
        by_password = Batcher(f"redis://:pass@{base}/4")
        assert await by_user.run("SET", "who", b"user") == b"OK"
        assert await by_password.run("SET", "who", b"password") == b"OK"
        await admin.execute_command("AUTH", "pass")
        await admin.select(3)
        assert await admin.get("who") == b"user"
        await admin.select(4)
        assert await admin.get("who") == b"password"
        wrong = Batcher(f"redis://gateway:nope@{base}/0")
        with pytest.raises(RedisUnavailable, match="refused the connection's set-up"):
            await wrong.run("PING")
        for batch in (by_user, by_password, wrong):
            await batch.aclose()
    finally:
        await admin.aclose()
        server.stop()


async def test_reset_fails_the_commands_on_a_hung_connection_and_the_next_command_opens_a_new_one():
    server = RedisServer()
    batch = Batcher(server.url)
    try:
        await batch.run("PING")
        server.process.send_signal(signal.SIGSTOP)  # hung: connected, never answering
        hung = batch.call("PING")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(hung), 0.2)
        batch.reset()  # what the cache does when a command timed out
        with pytest.raises(RedisUnavailable):
            await hung
        selecting = Batcher(server.url.rsplit("/", 1)[0] + "/1", connect_timeout_s=0.2)  # its SELECT never answered
        with pytest.raises(RedisUnavailable, match="unreachable: TimeoutError"):
            await asyncio.wait_for(selecting.run("PING"), 5)  # bounded by the connect timeout, not hung
        server.process.send_signal(signal.SIGCONT)
        assert await asyncio.wait_for(batch.run("PING"), 5) == b"PONG"
    finally:
        await batch.aclose()
        server.stop()


class _Transport:
    def __init__(self) -> None:
        self.written = b""

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return False

    def abort(self) -> None:
        pass


async def test_replies_split_anywhere_are_read_whole_and_each_goes_to_its_command():
    replies = b"+OK\r\n-ERR no such thing\r\n:42\r\n$-1\r\n$5\r\nab\r\nc\r\n*2\r\n:1\r\n*2\r\n$0\r\n\r\n*-1\r\n"
    expected = [b"OK", ReplyError, 42, None, b"ab\r\nc", [1, [b"", None]]]
    loop = asyncio.get_running_loop()
    for cut in range(1, 8):
        wire = _Wire()
        wire.connection_made(_Transport())
        futures = [loop.create_future() for _ in expected]
        wire.send(b"", futures)
        for i in range(0, len(replies), cut):
            wire.data_received(replies[i : i + cut])
        for future, want in zip(futures, expected, strict=True):
            if want is ReplyError:
                assert isinstance(future.exception(), ReplyError)
                assert str(future.exception()) == "ERR no such thing"
            else:
                assert future.result() == want, (cut, want)
        assert not wire.buf and not wire.pending


async def test_a_reply_nobody_asked_for_closes_the_connection_and_fails_what_waits():
    loop = asyncio.get_running_loop()
    wire = _Wire()
    wire.connection_made(_Transport())
    waiting = loop.create_future()
    wire.send(b"", [waiting])
    wire.data_received(b":1\r\n:2\r\n")  # two replies, one command: out of step
    assert waiting.result() == 1
    assert wire.closed
    later = loop.create_future()
    wire.send(b"", [later])
    with pytest.raises(RedisUnavailable):
        later.result()


def test_commands_are_packed_as_arrays_of_bulk_strings():
    assert (
        pack(("SET", "k", b"\x00v", "PX", 1500))
        == b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\n\x00v\r\n$2\r\nPX\r\n$4\r\n1500\r\n"
    )
    assert parse(pack(("a",)), 0) == ([b"a"], 11)
    with pytest.raises(TypeError, match="bytes, str or a number"):
        pack(("SET", None))


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, signed by itself (the test's own CA)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "redis.crt", folder / "redis.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def _redis_server(*argv: str) -> subprocess.Popen:
    server = subprocess.Popen(
        ["redis-server", "--save", "", "--appendonly", "no", "--bind", "127.0.0.1", *argv], stdout=subprocess.DEVNULL
    )
    return server


async def _answers(batch: Batcher, deadline_s: float = 5.0) -> bytes:
    """PING until the server started by the test answers (it is still binding at first)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while True:
        try:
            return await batch.run("PING")
        except RedisUnavailable:
            if loop.time() > end:
                raise
            await asyncio.sleep(0.05)


async def test_a_tls_url_is_verified_against_its_ca_and_a_unix_socket_url_is_used(tmp_path: Path):
    cert, key = _self_signed(tmp_path)
    port = free_port()
    sock = tmp_path / "redis.sock"
    server = _redis_server(
        "--port", "0", "--tls-port", str(port), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
        "--tls-auth-clients", "no", "--unixsocket", str(sock),
    )  # fmt: skip
    try:
        verified = Batcher(f"rediss://127.0.0.1:{port}/2?ssl_ca_certs={cert}", connect_timeout_s=2.0)
        assert await _answers(verified) == b"PONG"
        assert await verified.run("SET", "over", b"tls") == b"OK"
        unverified = Batcher(f"rediss://127.0.0.1:{port}/2?ssl_cert_reqs=none", connect_timeout_s=2.0)
        assert await unverified.run("GET", "over") == b"tls"  # the same database, read without the CA
        untrusted = Batcher(f"rediss://127.0.0.1:{port}/2", connect_timeout_s=2.0)  # the system's CAs only
        with pytest.raises(RedisUnavailable, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
            await untrusted.run("PING")
        local = Batcher(f"unix://{sock}?db=2", connect_timeout_s=2.0)
        assert await local.run("GET", "over") == b"tls"
        for batch in (verified, unverified, untrusted, local):
            await batch.aclose()
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_a_process_without_redis_url_never_imports_redis_py(tmp_path: Path):
    """redis-py's import costs a process about 70 ms and several MB; without REDIS_URL nothing needs it."""
    probe = (
        "import sys, django; django.setup(); import routing.gateway.app, routing.runtime.process; "
        "from routing.runtime.cache.response_cache import build_store; from routing.runtime.cluster.idempotency import IdempotencyStore; "
        "build_store(); IdempotencyStore(redis_url=''); print(sorted(m for m in sys.modules if m.split('.')[0] == 'redis'))"
    )
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'never-created.sqlite3'}"  # importing needs no database
    env["DJANGO_SETTINGS_MODULE"] = "gateway_project.settings"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
