"""Admin pages that are not a model's change list: explain a route.

Each is a row of `PAGES`: its URL under /admin/ (gateway_project/urls.py takes them
from `urlpatterns`) and its line on the admin index (the `admin_pages` tag), so a new
page is its view, its row and its template (docs/architecture.md#what-a-change-touches).

Operators ask "why did my request go there?": this page answers for a
hypothetical request with the configuration this process is serving right now
(the live snapshot), with the breaker states requests meet cluster-wide (this
process's and, with Redis, every process's), the same answer as `manage.py explain_route`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from routing.config import live
from routing.ops import scope, sso
from routing.plan.explain import explain
from routing.plan.preflight import KINDS
from routing.runtime.cluster.breaker_sync import breaker_states
from routing.runtime.process import current


class ExplainForm(forms.Form):
    org = forms.ChoiceField(help_text="The organisation whose key would send the request.")
    model = forms.CharField(max_length=200, help_text="Model id or alias, as a client would send it.")
    kind = forms.ChoiceField(choices=[(k, k) for k in sorted(KINDS)], initial="chat", label="Endpoint")
    stream = forms.BooleanField(required=False)
    tools = forms.BooleanField(required=False)
    tokens = forms.IntegerField(required=False, min_value=0, label="Prompt tokens", help_text="Optional estimate.")

    def __init__(self, *args: Any, orgs: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["org"].choices = [(o, o) for o in orgs]


def explain_route_view(request: HttpRequest) -> HttpResponse:
    snapshot = live.current()
    orgs = scope.visible_orgs(request.user)  # an org-scoped operator explains its orgs' routes only
    form = ExplainForm(request.GET or None, orgs=sorted(o for o in snapshot.orgs if scope.org_visible(orgs, o)))
    result = None
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        process = current()  # this process's breakers and deployment figures (docs/architecture.md#composition-root)
        result = explain(
            snapshot,
            data["org"],
            data["model"],
            data["stream"],
            data["tools"],
            data["tokens"],
            data["kind"],
            states=breaker_states(snapshot, serving=True, local=process.breakers),
            picker=process.picker,
        )
    context = {
        **admin.site.each_context(request),
        "title": "Explain a route",
        "form": form,
        "result": result,
        "snapshot_version": snapshot.config_version,
    }
    return TemplateResponse(request, "admin/routing/explain_route.html", context)


def price_proposals_view(request: HttpRequest) -> HttpResponse:
    """The price versions `sync_prices` proposed (docs/commands.md#sync_prices): accept (appends the dated
    version through the one validation, recorded in the history) or reject, one model at a time."""
    from routing.config import price_proposals  # reason: the page's store reads settings and the database
    from routing.config.store import ConfigInvalid

    message = error = ""
    if request.method == "POST":
        model = request.POST.get("model", "")
        if not request.user.has_perm("providers.change_model"):
            error = "You may not change models' prices: ask someone who may change models."
        else:
            try:
                if request.POST.get("action") == "accept":
                    p = price_proposals.accept(model, author=request.user.get_username())
                    message = f"{p.model} is priced from {p.effective_from}: {'; '.join(p.changes())}."
                else:
                    price_proposals.reject(model)
                    message = f"The proposal for {model} was rejected."
            except (price_proposals.NoProposal, ConfigInvalid) as exc:
                error = str(exc)
    context = {
        **admin.site.each_context(request),
        "title": "Price proposals",
        "proposals": price_proposals.pending(),
        "message": message,
        "error": error,
    }
    return TemplateResponse(request, "admin/routing/price_proposals.html", context)


@dataclass(frozen=True, slots=True)
class Page:
    """An admin page that is not a model's change list: where it lives and how the index lists it."""

    route: str  # under /admin/
    name: str  # the URL name
    title: str  # the index's link text
    about: str  # the index's one line on it
    view: Callable[[HttpRequest], HttpResponse]


PAGES: tuple[Page, ...] = (
    Page(
        "explain-route/",
        "explain-route",
        "Explain a route",
        "Which policy matches a request and which links of its chain would serve it",
        explain_route_view,
    ),
    Page(
        "price-proposals/",
        "price-proposals",
        "Price proposals",
        "Dated price versions manage.py sync_prices proposes from the price catalogue: accept or reject",
        price_proposals_view,
    ),
)


def urlpatterns(site: admin.AdminSite) -> list[URLPattern]:
    """The pages' URLs, staff only (the admin's login), ahead of the admin's own."""
    pages = [path(f"admin/{page.route}", site.admin_view(page.view), name=page.name) for page in PAGES]
    if settings.SWITCHBOARD_OIDC_ISSUER:  # the admin's Log out ends the provider's session too (docs/sso.md#logout)
        pages.append(path("admin/logout/", sso.admin_logout(site), name="sso-admin-logout"))
    return pages
