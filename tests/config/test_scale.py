"""Configuration at scale: 10 000 models, 5 000 fallback links with distinct targets, 1 000 orgs,
10 000 policies, on whichever database the suite runs (docs/configuration-at-scale.md).

At this size the reader used to build one IN list over every link target, which SQLite
refuses ("Expression tree is too large"), so export_config crashed and the server would
not start; import took 10-12 s at half the size; an org page ran a query per policy.
"""

from __future__ import annotations

import copy
import io
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from bench.config_scale import make_document
from policies.models import Org, OrgPolicy
from providers.models import FallbackLink, Model
from routing.config import live
from routing.config.document import document_from_db
from routing.config.store import dump_yaml, export_document, import_document

MODELS, LINKS, ORGS, POLICIES = 10_000, 5_000, 1_000, 10_000
READER_QUERIES = 11  # one per table (deployments and alert rules included), whatever the size
WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)


@pytest.fixture(scope="module")
def imported_once(django_db_setup: None, django_db_blocker: Any) -> Iterator[dict]:
    """The large configuration, imported (and committed) once for the module, removed after it."""
    doc = make_document(MODELS, links=LINKS, orgs=ORGS, policies=POLICIES)
    doc["orgs"][0]["policies"] = [  # one org with a long list, for its admin page
        {"pattern": f"m-{k:04d}*", "action": "deny" if k % 3 else "allow", "priority": k} for k in range(150)
    ]
    doc["orgs"][0]["credentials"] = [{"provider": "prov-1", "api_key_env": "SWITCHBOARD_UPSTREAM_ORG_PROV_1_KEY"}]
    with django_db_blocker.unblock():
        result = import_document(copy.deepcopy(doc))
    assert result.created["model"] == MODELS and result.created["fallback link"] == LINKS
    yield doc
    with django_db_blocker.unblock():
        call_command("flush", interactive=False, verbosity=0)


@pytest.fixture
def large(imported_once: dict, db: None) -> dict:
    """Each test runs in a transaction over the shared import, rolled back after it."""
    return copy.deepcopy(imported_once)


def test_import_boot_export_and_reimport_as_a_no_op(large):
    assert Model.objects.count() == MODELS
    assert FallbackLink.objects.count() == LINKS
    assert FallbackLink.objects.values("target").distinct().count() == LINKS
    assert OrgPolicy.objects.count() == POLICIES - 10 + 150

    snapshot, errors, version = live.load_from_db()
    assert errors == [] and snapshot is not None and snapshot.version == version
    assert len(snapshot.models) == MODELS and len(snapshot.orgs) == ORGS
    assert snapshot.models["m-00007"].fallbacks == (f"m-{7 + MODELS // 2:05d}",)
    assert snapshot.models["m-00007"].input_price_per_mtok == 0.15
    assert len(snapshot.orgs["org-00000"].policies) == 150

    with CaptureQueriesContext(connection) as reads:
        exported = export_document()
    assert len(reads.captured_queries) <= READER_QUERIES
    assert exported["models"] == large["models"]
    assert exported["aliases"] == large["aliases"]
    assert {o["name"]: o for o in exported["orgs"]}["org-00000"]["policies"] == large["orgs"][0]["policies"]

    with CaptureQueriesContext(connection) as reimport:
        again = import_document(exported)
    writes = [q["sql"][:80] for q in reimport.captured_queries if WRITE.match(q["sql"])]
    assert not again.changed and writes == []
    assert live.read_version() == version  # nothing bumped: serving processes do not even rebuild
    assert len(reimport.captured_queries) < 40


def test_a_large_change_is_written_in_bulk_and_bumps_the_version(large):
    version = live.read_version()
    changed = make_document(MODELS, links=LINKS, orgs=ORGS, policies=POLICIES)
    for item in changed["models"][:3000]:
        item["context_window"] = 64000
    for item in changed["models"][:2000]:  # new chains: 2 000 links replaced
        if item.get("fallbacks"):
            item["fallbacks"] = [f"m-{MODELS - 1 - int(item['id'][2:]):05d}"]
    with CaptureQueriesContext(connection) as ctx:
        result = import_document(changed)
    assert result.updated["model"] >= 3000 and result.created["fallback link"] == 2000
    assert len(ctx.captured_queries) < 400  # batches, not one statement per row
    assert live.read_version() > version  # serving processes see the change (bulk writes send no signals)
    assert export_document()["models"][5]["fallbacks"] == [f"m-{MODELS - 6:05d}"]


def test_reader_and_admin_pages_stay_within_a_query_budget(large, admin_client_, django_assert_max_num_queries):
    with django_assert_max_num_queries(READER_QUERIES):
        document_from_db()
    org = Org.objects.get(name="org-00000")
    model = Model.objects.get(public_id="m-00007")
    pages = [
        (reverse("admin:policies_org_change", args=[org.pk]), 15),
        (reverse("admin:policies_org_changelist"), 12),
        (reverse("admin:providers_model_changelist"), 12),
        (reverse("admin:providers_model_change", args=[model.pk]), 13),  # + the deployments inline
        (reverse("admin:policies_orgpolicy_add"), 10),
        (reverse("admin:policies_apikey_add"), 10),
    ]
    for url, budget in pages:
        with django_assert_max_num_queries(budget):
            response = admin_client_.get(url)
        assert response.status_code == 200, url
        # No select lists every model, org or agent: those are looked up by autocomplete.
        selects = re.findall(rb"<select.*?</select>", response.content, re.DOTALL)
        assert max((s.count(b"<option") for s in selects), default=0) <= 20, url
    assert b"m-0149*" in admin_client_.get(pages[0][0]).content  # all 150 policies render


def test_import_command_shows_progress_on_request(tmp_path, db):
    path = tmp_path / "config.yaml"
    path.write_text(dump_yaml(make_document(50)))
    out, err = io.StringIO(), io.StringIO()
    call_command("import_config", str(path), "--progress", stdout=out, stderr=err)
    lines = err.getvalue().splitlines()
    assert any("validating" in line for line in lines) and lines[-1].endswith("done")
    assert re.search(r"\d+ (created|updated)", out.getvalue())  # the summary (the large import may be there)
    quiet = io.StringIO()
    call_command("import_config", str(path), stdout=io.StringIO(), stderr=quiet)  # not a terminal
    assert quiet.getvalue() == ""
