"""bench.alerts_scale and the `alerts` A/B profile: their configurations are valid, a run's budget always
ends past 100 %, and the verdict counts a duplicate, a miss or a late breaker alert as a failure."""

from __future__ import annotations

import yaml

from bench import ab, alerts_scale, config
from routing.config.validation import validate_document
from routing.gateway.limiting import RESERVE_PROMPT_FLOOR


def test_the_scale_configuration_is_valid_with_a_budget_per_run_and_one_webhook_rule():
    doc = yaml.safe_load(alerts_scale.config_yaml("http://127.0.0.1:1", "http://127.0.0.1:2", runs=3))
    assert validate_document(doc) == []
    assert [o["name"] for o in doc["orgs"]] == ["run0", "run1", "run2", alerts_scale.BREAKER_ORG]
    assert [m["id"] for m in doc["models"]] == ["bud-chat", "brk-0", "brk-1", "brk-2"]
    (rule,) = doc["alerts"]
    assert rule["budget_percent"] == [80, 100] and rule["events"] == ["breaker_open"]


def test_after_the_last_whole_answer_a_reservation_still_fits_so_spend_passes_100_percent():
    cost = alerts_scale.PROMPT_TOKENS * alerts_scale.PRICE_PER_MTOK / 1e6
    budget = alerts_scale.ANSWERS_TO_100 * cost
    reservation = RESERVE_PROMPT_FLOOR * alerts_scale.PRICE_PER_MTOK / 1e6  # what the bench's "hi" reserves
    left = budget - int(alerts_scale.ANSWERS_TO_100) * cost
    assert reservation <= left < cost


def _row(**changes):
    row = {
        "run": 0,
        "statuses": {200: 160, 402: 840},
        "burst_s": 1.0,
        "arrived_s": {80: 0.5, 100: 0.6},
        "billed_percent": {80: 82, 100: 104},
        "per_threshold": {80: 1, 100: 1},
        "other_thresholds": [],
        "breaker_open": 1,
        "latency_s": 0.1,
        "unsigned": 0,
    }
    return {**row, **changes}


def test_exactly_one_alert_per_threshold_and_a_prompt_breaker_alert_pass():
    assert alerts_scale.problems(_row()) == []
    assert alerts_scale.table([_row()]).splitlines()[-1].endswith("ok")


def test_a_duplicate_a_miss_a_late_or_missing_breaker_alert_and_a_bad_signature_fail():
    assert alerts_scale.problems(_row(per_threshold={80: 2, 100: 1})) == ["2 alerts at 80 %"]
    assert alerts_scale.problems(_row(per_threshold={80: 1, 100: 0})) == ["0 alerts at 100 %"]
    assert alerts_scale.problems(_row(breaker_open=2)) == ["2 breaker_open alerts"]
    assert alerts_scale.problems(_row(latency_s=2.5)) == ["breaker_open after 2.5 s"]
    assert alerts_scale.problems(_row(latency_s=None, breaker_open=0)) == [
        "0 breaker_open alerts",
        "breaker_open after None s",
    ]
    assert alerts_scale.problems(_row(unsigned=1)) == ["1 with a bad signature"]


def test_the_alerts_ab_profile_configures_alerts_on_the_head_side_only():
    profile = ab.PROFILES["alerts"]
    base, head = yaml.safe_load(profile.document("http://m")), yaml.safe_load(profile.head("http://m"))
    assert validate_document(head) == [] and validate_document(base) == []
    assert "alerts" not in base
    assert head["alerts"][0]["webhook"] == {"url": "http://m/v1/embeddings"}
    assert {k: v for k, v in head.items() if k != "alerts"} == base  # the one difference: alerts
    assert ab.model("alerts") == config.FEATURES[0]  # the features' request, its budgets in play
