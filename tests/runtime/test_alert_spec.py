"""An alert rule read from the document (routing.config.alert_spec): each destination's fields, and the
webhook signing secret read only from a variable the allow rule accepts, with a refusal that says how to
allow it."""

from __future__ import annotations

from routing.config.alert_spec import alert_from_item, secret_env_allowed, secret_env_problem
from routing.config.secrets import env_prefix


def test_a_refused_secret_variable_names_both_ways_to_allow_it() -> None:
    assert secret_env_problem("SWITCHBOARD_ALERT_HOOK") is None
    assert secret_env_problem("DATABASE_URL") == (
        f"name it SWITCHBOARD_ALERT_... instead, or rename it to start with {env_prefix()!r}"
        " (SWITCHBOARD_SECRET_ENV_PREFIX) or add it to SWITCHBOARD_SECRET_ENV_ALLOW (comma-separated)"
    )


def test_a_variable_an_upstream_key_could_name_may_sign_a_webhook(settings) -> None:
    settings.SWITCHBOARD_SECRET_ENV_ALLOW = "HOOK_SECRET"
    assert secret_env_allowed("HOOK_SECRET") is True
    assert secret_env_allowed("SECRET_KEY") is False


def test_an_email_rule_keeps_its_recipients_and_has_no_url_or_secret() -> None:
    spec = alert_from_item({"name": "ops", "email": {"to": ["a@example.com", "b@example.com"]}}, {})
    assert (spec.kind, spec.to, spec.url, spec.secret_env, spec.secret) == (
        "email",
        ("a@example.com", "b@example.com"),
        "",
        "",
        None,
    )
    assert spec.destination == "email:a@example.com,b@example.com"


def test_a_webhook_secret_is_read_only_from_an_allowed_variable() -> None:
    environ = {"SWITCHBOARD_ALERT_HOOK": "s3cret", "SECRET_KEY": "django"}
    hook = {"url": "https://hooks.example.com/x?token=1", "secret_env": "SWITCHBOARD_ALERT_HOOK"}
    spec = alert_from_item({"name": "h", "webhook": hook}, environ)
    assert (spec.secret_env, spec.secret, spec.to) == ("SWITCHBOARD_ALERT_HOOK", "s3cret", ())
    assert spec.destination == "webhook:https://hooks.example.com/x"
    refused = alert_from_item({"name": "h", "webhook": {"url": "https://h", "secret_env": "SECRET_KEY"}}, environ)
    assert (refused.secret_env, refused.secret) == ("SECRET_KEY", None)
    unsigned = alert_from_item({"name": "h", "webhook": {"url": "https://h"}}, {"": "x"})
    assert (unsigned.secret_env, unsigned.secret) == ("", None)
