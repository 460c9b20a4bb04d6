"""Usage records end to end (docs/metrics.md#usage-records): real server (daphne or uvicorn), real mock upstream, real database.

Rows are read straight from each gateway's database, never through the product:
one record per request with the right fields; none lost while PostgreSQL is cut
off behind a TCP proxy (memory, then spool files, then written once it is back,
each exactly once); none lost when the server is stopped with SIGTERM.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.harness import Gateway, migrated_postgres
from tests.e2e.tcp_proxy import TcpProxy

CONFIG = """
resilience:
  max_retries: 1
  backoff_base_ms: 1
  backoff_max_ms: 5
  breaker_failure_threshold: 50
  breaker_cooldown_s: 1
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: u-ok
    provider: mock
    upstream_model: usage-ok
    capabilities: [chat, streaming]
    input_price_per_mtok: 2.5
    output_price_per_mtok: 10
  - id: u-primary
    provider: mock
    upstream_model: usage-primary
    capabilities: [chat, streaming]
    fallbacks: [u-backup]
  - id: u-backup
    provider: mock
    upstream_model: usage-backup
    capabilities: [chat, streaming]
    input_price_per_mtok: 1
    output_price_per_mtok: 4
  - id: u-bad
    provider: mock
    upstream_model: usage-bad
    capabilities: [chat, streaming]
orgs:
  - name: acme
    agents:
      - name: bot
"""

# The mock answers every chat with these token counts.
PROMPT_TOKENS, COMPLETION_TOKENS = 12, 7


# --------------------------------------------------------------------------- helpers


def usage_rows(database_url: str) -> list[dict]:
    """Every usage row of a gateway's database, read directly (SQLite file or PostgreSQL)."""
    sql = "SELECT * FROM routing_usagerecord"
    if database_url.startswith("sqlite:///"):
        with closing(sqlite3.connect(database_url[len("sqlite:///") :], timeout=10)) as conn:
            conn.row_factory = sqlite3.Row
            return [dict(row) for row in conn.execute(sql)]
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(database_url, row_factory=dict_row, connect_timeout=5) as conn:
        return list(conn.execute(sql))


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.05)


def spooled_rows(spool_dir: Path) -> list[dict]:
    """Records sitting in spool files (not rejected-*.jsonl, which are refused rows)."""
    if not spool_dir.exists():
        return []
    rows = []
    for path in sorted(spool_dir.glob("spool-*.jsonl")):
        try:
            text = path.read_text()
        except FileNotFoundError:  # written to the database meanwhile
            continue
        rows.extend(json.loads(line) for line in text.splitlines() if line.strip())
    return rows


def chat(http: httpx.Client, model: str, request_id: str | None = None, **extra) -> httpx.Response:
    headers = {"X-Request-Id": request_id} if request_id else {}
    return http.post(
        "/v1/chat/completions",
        headers=headers,
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], **extra},
    )


def backlog(gateway: Gateway) -> float | None:
    text = httpx.get(f"{gateway.url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "switchboard_usage_backlog":
                return sample.value
    return None


def client(gateway: Gateway) -> httpx.Client:
    return httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {gateway.api_key}"}, timeout=20)


# --------------------------------------------------------------------------- fields


def test_success_fallback_error_and_stream_each_leave_one_exact_record(make_gateway, mock_upstream):
    gw = make_gateway(CONFIG.format(mock=mock_upstream.url))
    mock_upstream.script("usage-primary", [], then={"status": 503})
    mock_upstream.script("usage-bad", [], then={"status": 400})
    run = uuid.uuid4().hex[:8]
    with client(gw) as http:
        ok = chat(http, "u-ok")  # no X-Request-Id: the gateway makes one and answers with it
        fell_back = chat(http, "u-primary", f"fb-{run}")
        failed = chat(http, "u-bad", f"err-{run}")
        unknown = chat(http, "no-such-model", f"404-{run}")
        with http.stream(
            "POST",
            "/v1/chat/completions",
            headers={"X-Request-Id": f"st-{run}"},
            json={
                "model": "u-ok",
                "stream": True,
                "stream_options": {"include_usage": True},
                "messages": [{"role": "user", "content": "hi"}],
            },
        ) as streamed:
            body = b"".join(streamed.iter_raw())
    assert ok.status_code == 200
    assert fell_back.status_code == 200 and fell_back.headers["x-switchboard-fallback"] == "upstream_5xx"
    assert failed.status_code == 400
    assert unknown.status_code == 404
    assert streamed.status_code == 200 and body.rstrip().endswith(b"data: [DONE]")

    ids = {
        "ok": ok.headers["x-request-id"],
        "fb": fell_back.headers["x-request-id"],
        "err": failed.headers["x-request-id"],
        "404": unknown.headers["x-request-id"],
        "st": streamed.headers["x-request-id"],
    }
    assert ids["fb"] == f"fb-{run}" and ids["st"] == f"st-{run}"  # the client's id is kept

    def by_id() -> dict[str, dict]:
        return {row["request_id"]: row for row in usage_rows(gw.database_url)}

    wait_for(lambda: set(ids.values()) <= set(by_id()), 5, "the five usage rows")
    all_rows = usage_rows(gw.database_url)
    assert len(all_rows) == 5, [r["request_id"] for r in all_rows]
    rows = {name: by_id()[rid] for name, rid in ids.items()}

    for row in rows.values():
        assert (row["org"], row["agent"], row["endpoint"]) == ("acme", "bot", "chat")
        assert row["key_prefix"] and gw.api_key.startswith(row["key_prefix"])
        assert row["latency_ms"] > 0
        assert row["created_at"]

    ok_row = rows["ok"]
    assert (ok_row["requested_model"], ok_row["resolved_model"], ok_row["model_used"]) == ("u-ok", "u-ok", "u-ok")
    assert (ok_row["provider"], ok_row["status"], ok_row["attempts"]) == ("mock", 200, 1)
    assert (ok_row["fallback_reason"], ok_row["error_code"]) == ("", "")
    assert (ok_row["prompt_tokens"], ok_row["completion_tokens"]) == (PROMPT_TOKENS, COMPLETION_TOKENS)
    assert float(ok_row["cost"]) == pytest.approx((PROMPT_TOKENS * 2.5 + COMPLETION_TOKENS * 10) / 1e6)
    assert not ok_row["streamed"]

    fb = rows["fb"]
    assert (fb["requested_model"], fb["model_used"], fb["provider"]) == ("u-primary", "u-backup", "mock")
    assert fb["fallback_reason"] == "upstream_5xx"
    assert fb["attempts"] == int(fell_back.headers["x-switchboard-attempts"]) == 3  # 2 on the primary, 1 served
    assert (fb["status"], fb["error_code"]) == (200, "")
    assert (fb["prompt_tokens"], fb["completion_tokens"]) == (PROMPT_TOKENS, COMPLETION_TOKENS)
    assert float(fb["cost"]) == pytest.approx((PROMPT_TOKENS * 1 + COMPLETION_TOKENS * 4) / 1e6)  # backup's prices

    err = rows["err"]
    assert (err["requested_model"], err["model_used"], err["provider"]) == ("u-bad", "u-bad", "mock")
    assert (err["status"], err["error_code"], err["attempts"]) == (400, "upstream_client_error", 1)
    assert err["fallback_reason"] == ""
    assert err["prompt_tokens"] is None and err["cost"] is None

    nf = rows["404"]
    assert (nf["requested_model"], nf["model_used"], nf["provider"]) == ("no-such-model", "", "")
    assert (nf["status"], nf["error_code"], nf["attempts"]) == (404, "model_not_found", 0)

    st = rows["st"]
    assert st["streamed"]
    assert (st["model_used"], st["status"], st["attempts"], st["error_code"]) == ("u-ok", 200, 1, "")
    assert st["ttft_ms"] is not None and 0 < st["ttft_ms"] <= st["latency_ms"]
    # tokens come from the usage frame the upstream streamed (relayed unchanged)
    assert (st["prompt_tokens"], st["completion_tokens"]) == (PROMPT_TOKENS, COMPLETION_TOKENS)
    assert float(st["cost"]) == pytest.approx((PROMPT_TOKENS * 2.5 + COMPLETION_TOKENS * 10) / 1e6)


# --------------------------------------------------------------------------- outage


@pytest.fixture
def fresh_postgres(postgres_url: str):
    """A new, migrated PostgreSQL database of its own; dropped afterwards."""
    with migrated_postgres(postgres_url, "sb_e2e_outage") as url:
        yield url


def test_database_outage_loses_nothing_and_writes_each_record_once(fresh_postgres, mock_upstream):
    direct = urlparse(fresh_postgres)
    proxy = TcpProxy(direct.port or 5432, direct.hostname or "127.0.0.1")
    via_proxy = direct._replace(netloc=f"{direct.username}:{direct.password}@127.0.0.1:{proxy.port}").geturl()
    gw = Gateway(
        database_url=via_proxy,
        config_yaml=CONFIG.format(mock=mock_upstream.url),
        workdir=Path(tempfile.mkdtemp(prefix="switchboard-gw-")),
        extra_env={"SWITCHBOARD_USAGE_MEMORY_BOUND": "10", "SWITCHBOARD_USAGE_FLUSH_S": "0.1"},
    )
    spool = gw.workdir / "spool"
    run = uuid.uuid4().hex[:8]
    before = [f"pre-{run}-{i}" for i in range(30)]
    during = [f"cut-{run}-{i}" for i in range(40)]
    try:
        gw.start()
        with client(gw) as http:
            assert [chat(http, "u-ok", rid).status_code for rid in before] == [200] * 30
            wait_for(lambda: len(usage_rows(fresh_postgres)) == 30, 5, "the first 30 rows")
            # Rows visible in PostgreSQL are not yet acknowledged to the gateway: cut only once
            # its backlog says every COMMIT came back, or the cut may catch an answer in flight.
            wait_for(lambda: backlog(gw) == 0, 5, "the first 30 rows acknowledged")

            proxy.cut()
            assert [chat(http, "u-ok", rid).status_code for rid in during] == [200] * 40

            def spooled_during() -> set[str]:
                return {r["request_id"] for r in spooled_rows(spool)} & set(during)

            # past the memory bound (10) the records go to disk: at most 10 stay in memory
            wait_for(lambda: len(spooled_during()) >= 30, 5, "records spooled to disk")
            spooled = {r["request_id"] for r in spooled_rows(spool)}
            # A batch whose COMMIT the cut interrupted is ambiguous to the gateway: it keeps
            # it (and writes it again on recovery, where record_id makes the replay a no-op),
            # so the spool may also hold rows already in the database; never anything else.
            assert spooled <= set(before) | set(during)
            assert len(spooled & set(during)) >= 30
            assert backlog(gw) >= 40
            assert len(usage_rows(fresh_postgres)) == 30

            proxy.restore()
            wait_for(
                lambda: len(usage_rows(fresh_postgres)) >= 70 and not list(spool.glob("spool-*")),
                15,
                "every record in PostgreSQL and the spool emptied",
            )
            rows = usage_rows(fresh_postgres)
            assert len(rows) == len({r["request_id"] for r in rows}) == 70
            assert {r["request_id"] for r in rows} == set(before) | set(during)
            assert all(r["status"] == 200 and r["model_used"] == "u-ok" for r in rows)
            wait_for(lambda: backlog(gw) == 0, 2, "the backlog gauge back at 0")
            assert not list(spool.glob("rejected-*"))
        assert "usage database unreachable" in gw.logs()
    finally:
        gw.stop()
        proxy.stop()


# --------------------------------------------------------------------------- shutdown


def test_sigterm_right_after_requests_flushes_every_record(make_gateway, mock_upstream):
    # A long flush interval keeps the records in memory until the signal arrives. No Redis: a shared one
    # left empty by an earlier test makes the first rounds rebuild the counters, and the spend read that
    # follows writes the queued records first (a correct early write that would hide the signal's).
    gw = make_gateway(CONFIG.format(mock=mock_upstream.url), env={"SWITCHBOARD_USAGE_FLUSH_S": "30", "REDIS_URL": ""})
    run = uuid.uuid4().hex[:8]
    sent = [f"term-{run}-{i}" for i in range(25)]
    with client(gw) as http:
        assert [chat(http, "u-ok", rid).status_code for rid in sent] == [200] * 25
    assert usage_rows(gw.database_url) == []  # still in the server's memory
    gw.stop()
    assert gw.process.returncode != -signal.SIGKILL, "the server did not exit on SIGTERM within 15 s"

    in_db = [r["request_id"] for r in usage_rows(gw.database_url)]
    in_spool = [r["request_id"] for r in spooled_rows(gw.workdir / "spool")]
    assert len(in_db) == len(set(in_db))
    assert sorted(set(in_db) | set(in_spool)) == sorted(sent)
    assert in_db and sorted(in_db) == sorted(sent), f"flushed {len(in_db)}, left {len(in_spool)} in the spool"


# --------------------------------------------------------------------------- kill -9


def test_kill_9_right_after_answers_then_restart_writes_exactly_those_records(make_gateway, mock_upstream):
    # A long flush interval: nothing reaches the database before the kill.
    gw = make_gateway(CONFIG.format(mock=mock_upstream.url), env={"SWITCHBOARD_USAGE_FLUSH_S": "30"})
    run = uuid.uuid4().hex[:8]
    sent = [f"kill-{run}-{i}" for i in range(20)]
    with client(gw) as http:
        assert [chat(http, "u-ok", rid).status_code for rid in sent] == [200] * 20
    assert usage_rows(gw.database_url) == []
    gw.process.send_signal(signal.SIGKILL)
    gw.process.wait(timeout=10)
    gw.log.close()
    gw.process = None

    gw.extra_env["SWITCHBOARD_USAGE_FLUSH_S"] = "0.2"
    gw.start()  # same database, same spool directory
    httpx.get(f"{gw.url}/metrics", timeout=10)  # any request starts the background writer
    # A replayed file is removed once its rows are committed: with none left, every row (and any
    # duplicate) is in the database. A record queued after its answer went out could be lost to the
    # kill (tests/gateway/test_record_before_answer.py).
    wait_for(lambda: not list((gw.workdir / "spool").glob("*.jsonl")), 10, "the killed process's files replayed")
    ids = [r["request_id"] for r in usage_rows(gw.database_url)]
    assert sorted(ids) == sorted(sent)  # each exactly once
