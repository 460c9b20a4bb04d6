"""The management API's OpenAPI 3.1 document (docs/management-api.md#openapi): served, valid, complete, and
a short property-based run (schemathesis) against it: no 5xx, every answer as the document says."""

from __future__ import annotations

import json

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from django.test import Client
from django.urls import get_resolver
from hypothesis import HealthCheck, given, settings
from openapi_spec_validator import validate
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from policies.tokens import create_management_token
from routing.config.store import import_document
from routing.ops.api.views import OPENAPI_PATH

pytestmark = [
    pytest.mark.django_db(transaction=True),  # the WSGI handler closes connections per request
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),  # schemathesis 3 on jsonschema 4.18+
]
DOC = {
    "providers": [{"name": "mock", "base_url": "http://127.0.0.1:9/v1"}],
    "models": [{"id": "chat-a", "provider": "mock", "upstream_model": "x", "capabilities": ["chat"]}],
    "orgs": [{"name": "acme", "agents": [{"name": "bot"}]}],
}
CHECKS = (not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance)
EXAMPLES = 12  # per operation: the whole run takes seconds


def spec() -> dict:
    return json.loads(OPENAPI_PATH.read_text())


def test_the_served_document_is_the_committed_one_and_valid_openapi_3_1():
    served = Client().get("/api/v1/openapi.json")
    assert served.status_code == 200 and served.json() == spec()
    assert spec()["openapi"] == "3.1.0"
    validate(spec())


def test_every_route_of_the_api_is_in_the_document():
    from routing.ops.api import urls

    routes = {
        "/api/v1/" + str(p.pattern).replace("<int:", "{").replace("<str:", "{").replace(">", "}")
        for p in urls.urlpatterns
        if "openapi" not in str(p.pattern) and "^" not in str(p.pattern)
    }
    assert routes == set(spec()["paths"])
    assert get_resolver().resolve("/api/v1/keys").func.__name__ == "keys_view"


def test_no_5xx_and_every_answer_matches_the_document():
    """A few examples per operation, derandomised (the same inputs every run), as a superuser-scoped
    read-write token: bad input must be a 4xx of the document, never a 500."""
    import_document(DOC)
    _, secret = create_management_token(name="fuzz", scope="write")
    schemathesis.experimental.OPEN_API_3_1.enable()  # 3.x reads 3.1 documents behind this switch
    schema = schemathesis.from_dict(spec(), app=get_wsgi_application())
    auth = {"Authorization": f"Bearer {secret}"}
    # Random ids and names mostly miss: first the real objects, each answer checked the same way.
    key = {"org": "acme", "agent": "bot", "name": "k", "limits": {"rpm": 5}, "models": ["chat-*"]}
    first = schema["/api/v1/keys"]["POST"].make_case(body=key, media_type="application/json")
    created = first.call_wsgi(headers=auth)
    assert created.status_code == 201, created.get_data(as_text=True)
    first.validate_response(created, checks=CHECKS)
    key_id = created.json["id"]
    known = [
        ("/api/v1/keys", "GET", {}, None),
        ("/api/v1/keys/{key_id}", "GET", {"key_id": key_id}, None),
        ("/api/v1/keys/{key_id}", "PATCH", {"key_id": key_id}, {"budget": {"usd": 1, "period": "day"}}),
        ("/api/v1/keys/{key_id}/rotate", "POST", {"key_id": key_id}, {"grace_seconds": 30}),
        ("/api/v1/keys/{key_id}/revoke", "POST", {"key_id": key_id}, None),
        ("/api/v1/orgs/{org}", "GET", {"org": "acme"}, None),
        ("/api/v1/orgs/{org}/agents/{agent}", "PATCH", {"org": "acme", "agent": "bot"}, {"limits": {"tpm": 9}}),
        ("/api/v1/usage", "GET", {}, None),
        ("/api/v1/breakers", "GET", {}, None),
    ]
    for path, method, params, payload in known:
        case = schema[path][method].make_case(path_parameters=params, body=payload, media_type="application/json")
        response = case.call_wsgi(headers=auth)
        assert response.status_code in (200, 201), (path, method, response.get_data(as_text=True))
        case.validate_response(response, checks=CHECKS)
    failures: list[str] = []
    statuses: list[int] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        name = operation.verbose_name

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def run(case):  # noqa: ANN001 - hypothesis' case
            response = case.call_wsgi(headers={"Authorization": f"Bearer {secret}"})
            statuses.append(response.status_code)
            try:
                case.validate_response(response, checks=CHECKS)
            except AssertionError as exc:
                if not any(f.startswith(name) for f in failures):  # noqa: B023 - run() runs in this iteration
                    failures.append(f"{name}: {str(exc)[:600]}")  # noqa: B023 - once, not per shrink step
                raise

        try:
            run()
        except AssertionError:
            pass
    assert failures == []
    assert len(statuses) >= 5 * len(spec()["paths"])  # it ran
    assert {200, 201, 400, 404} <= set(statuses)  # served, created, refused: not only one kind of answer


def test_the_document_says_which_writes_an_org_token_is_refused_and_that_tokens_expire():
    """The 403 `forbidden` of an org-limited token past its org's bounds is documented on each bounded write,
    and a real refusal conforms to the document; an expired token is one of the 401's cases."""
    from policies.models import Org

    bounded = [
        ("/api/v1/keys", "post"),
        ("/api/v1/keys/{key_id}", "patch"),
        ("/api/v1/orgs/{org}", "patch"),
        ("/api/v1/orgs/{org}/agents", "post"),
        ("/api/v1/orgs/{org}/agents/{agent}", "patch"),
    ]
    for path, method in bounded:
        assert "`forbidden`" in spec()["paths"][path][method]["responses"]["403"]["description"], (path, method)
    assert "expired" in spec()["paths"]["/api/v1/keys"]["get"]["responses"]["401"]["description"]
    assert "expires_at" in spec()["components"]["securitySchemes"]["managementToken"]["description"]
    import_document(
        {**DOC, "orgs": [{"name": "acme", "budget": {"usd": 1, "period": "day"}, "agents": [{"name": "bot"}]}]}
    )
    _, secret = create_management_token(name="tenant", scope="write", org=Org.objects.get(name="acme"))
    schemathesis.experimental.OPEN_API_3_1.enable()
    schema = schemathesis.from_dict(spec(), app=get_wsgi_application())
    case = schema["/api/v1/orgs/{org}"]["PATCH"].make_case(
        path_parameters={"org": "acme"}, body={"budget": {"usd": 1000, "period": "day"}}, media_type="application/json"
    )
    response = case.call_wsgi(headers={"Authorization": f"Bearer {secret}"})
    assert response.status_code == 403 and response.json["error"]["code"] == "forbidden"
    case.validate_response(response, checks=CHECKS)
