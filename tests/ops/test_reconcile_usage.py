"""`manage.py reconcile_usage` (docs/commands.md#reconcile_usage): provider exports in the shapes of
OpenAI's usage API, Anthropic's usage and cost reports and a CSV, against real usage records."""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from providers.models import Model, Provider
from routing.models import UsageRecord

EXPORTS = Path(__file__).parent.parent / "fixtures" / "exports"


def record(model: str, provider: str, day: int, prompt: int, completion: int, cost: str, **kw) -> None:
    UsageRecord.objects.create(
        record_id=uuid.uuid4().hex,
        request_id=uuid.uuid4().hex,
        org="acme",
        endpoint="chat",
        model_used=model,
        provider=provider,
        status=200,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cost=Decimal(cost),
        created_at=datetime(2026, 1, day, 12, tzinfo=UTC),
        **kw,
    )


@pytest.fixture
def records(db):
    openai = Provider.objects.create(name="oa", dialect="openai", base_url="http://127.0.0.1:9/v1")
    claude = Provider.objects.create(name="an", dialect="anthropic", base_url="http://127.0.0.1:9/v1")
    Model.objects.create(public_id="gpt4o", provider=openai, upstream_model="gpt-4o-2024-08-06", capabilities=["chat"])
    Model.objects.create(
        public_id="mini", provider=openai, upstream_model="gpt-4o-mini-2024-07-18", capabilities=["chat"]
    )
    Model.objects.create(
        public_id="sonnet", provider=claude, upstream_model="claude-sonnet-4-20250514", capabilities=["chat"]
    )
    record("gpt4o", "oa", 1, 2006, 300, "0.005615")
    record("gpt4o", "oa", 1, 994, 400, "0.009185")
    record("gpt4o", "oa", 1, 5000, 5000, "0", cached=True)  # a cache hit: never on the provider's bill
    record("gpt4o", "oa", 2, 1000, 100, "0.0035")
    record("mini", "oa", 2, 10, 10, "0.00001")  # the provider has no such day: named
    record("sonnet", "an", 1, 4404, 503, "0.016539")
    # (the provider's gpt-4o-mini of 2026-01-01 has no record here: named)


def run(*args: str) -> list[str]:
    out = io.StringIO()
    call_command("reconcile_usage", *args, stdout=out)
    return out.getvalue().splitlines()


def line(lines: list[str], day: str, model: str) -> list[str]:
    found = [text.split() for text in lines if text.startswith(day) and f" {model} " in f"{text} "]
    assert len(found) == 1, lines
    return found[0]


def test_a_csv_export_shows_0_drift_for_matching_records_and_names_the_missing_ones(records) -> None:
    lines = run(str(EXPORTS / "usage.csv"), "--provider", "oa")
    # day model | gw prompt, prov prompt, drift | gw compl, prov compl, drift | gw cost, prov cost, drift
    assert line(lines, "2026-01-01", "gpt-4o-2024-08-06")[2:] == [
        "3000", "3000", "0", "700", "700", "0", "0.014800", "0.014800", "0.000000"
    ]  # fmt: skip
    assert line(lines, "2026-01-02", "gpt-4o-2024-08-06")[2:11] == [
        "1000", "1000", "0", "100", "100", "0", "0.003500", "0.003500", "0.000000"
    ]  # fmt: skip
    assert "missing in the gateway" in " ".join(line(lines, "2026-01-01", "gpt-4o-mini-2024-07-18"))
    assert "missing in the provider export" in " ".join(line(lines, "2026-01-02", "gpt-4o-mini-2024-07-18"))
    summary = lines[-1]
    assert summary.startswith("2 of 2 day/model lines on both sides with 0 drift"), summary
    assert "missing in the gateway: 2026-01-01 gpt-4o-mini-2024-07-18" in summary
    assert "missing in the provider export: 2026-01-02 gpt-4o-mini-2024-07-18" in summary


def test_openais_usage_api_page_is_read_per_bucket_day_and_model(records) -> None:
    lines = run(str(EXPORTS / "openai_usage_completions.json"), "--provider", "oa")
    assert line(lines, "2026-01-01", "gpt-4o-2024-08-06")[2:8] == ["3000", "3000", "0", "700", "700", "0"]
    assert lines[-1].startswith("2 of 2 day/model lines on both sides with 0 drift"), lines[-1]


def test_anthropics_usage_and_cost_reports_match_a_record_priced_with_its_cache_classes(records) -> None:
    usage = run(str(EXPORTS / "anthropic_usage_report.json"), "--provider", "an")
    # the prompt is uncached + 5-minute + 1-hour writes + reads, as the record counts it
    assert line(usage, "2026-01-01", "claude-sonnet-4-20250514")[2:8] == ["4404", "4404", "0", "503", "503", "0"]
    cost = run(str(EXPORTS / "anthropic_cost_report.json"), "--provider", "an")
    # cents in the report: 0.9060 + 0.7479 = $0.016539
    assert line(cost, "2026-01-01", "claude-sonnet-4-20250514")[-3:] == ["0.016539", "0.016539", "0.000000"]
    assert cost[-1] == "1 of 1 day/model lines on both sides with 0 drift"


def test_a_drift_is_shown_and_named(records) -> None:
    record("gpt4o", "oa", 2, 20, 0, "0.00005")  # one more request than the provider billed
    lines = run(str(EXPORTS / "usage.csv"), "--provider", "oa")
    assert line(lines, "2026-01-02", "gpt-4o-2024-08-06")[2:5] == ["1020", "1000", "20"]
    assert "drift on 2026-01-02 gpt-4o-2024-08-06" in lines[-1]


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"when,what\n1,2\n", "needs a header with a day"),
        (b'{"data": [{"starting_at": "2026-01-01T00:00:00Z", "results": [{"output_tokens": 3}]}]}', "group_by=model"),
        (b"{not json", "is not valid JSON"),
    ],
)
def test_a_file_that_is_no_export_is_refused_saying_what_is_expected(db, tmp_path, content, words) -> None:
    path = tmp_path / "export"
    path.write_bytes(content)
    with pytest.raises(CommandError) as exc:
        run(str(path))
    assert words in str(exc.value)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (
            b"date,model,cost\n2026-01-01,m," + b"9" * 200_000 + b"\n",
            "line 2 is not CSV this command reads: field larger",
        ),
        ("date,model,cost\n2026-01-01,m,1\n".encode("utf-16"), "is UTF-16 text: save it as UTF-8"),
        (b"date,model,cost\n2026-01-01,m\xe9,1\n", "is not UTF-8 text (byte 29)"),
        (b'{"data": [{"start_time": 100000000000000000000, "results": []}]}', "is not a time: an epoch number"),
        (b'{"data": [{"start_time": -1000000000000, "results": []}]}', "is not a time: an epoch number"),
        (b"date,model,input_tokens\n2026-01-01,m,1e999999999\n", "is not a number of tokens"),
        (b"date,model,cost\n2026-01-01,m,lots\n", "'lots' is not an amount of money"),
    ],
    ids=["field-over-128k", "utf16", "latin1", "epoch-1e20", "epoch-minus-1e12", "huge-tokens", "bad-cost"],
)
def test_hostile_exports_are_clean_errors(db, tmp_path, content, words) -> None:
    path = tmp_path / "export"
    path.write_bytes(content)
    with pytest.raises(CommandError) as exc:
        run(str(path))
    assert words in str(exc.value)


def test_the_export_is_read_no_further_than_its_bound(db, tmp_path, monkeypatch) -> None:
    from routing.ops.usage import reconcile

    monkeypatch.setattr(reconcile, "MAX_EXPORT_BYTES", 1024)
    with pytest.raises(CommandError) as exc:
        run("/dev/zero")
    assert "zero is larger than 1024 bytes: export a shorter period" in str(exc.value)


def test_control_characters_from_the_export_are_escaped_in_the_report(db, tmp_path) -> None:
    path = tmp_path / "export.csv"
    path.write_bytes(b"date,model,input_tokens\n2026-01-01,evil\x1b]0;owned\x07\x1b[2J,5\n")
    lines = run(str(path))
    text = "\n".join(lines)
    assert "\x1b" not in text and "\x07" not in text
    assert "evil\\x1b]0;owned\\x07" in text
