"""Who may call what: orgs and their agents, policies and BYO credentials.

An org's entries refer to the catalogue (a default model, a fallback chain's links, a
credential's provider), so these rules build on routing.config.validation_rules.catalogue.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from routing.config.identifiers import MAX_POLICIES
from routing.config.schema import AGENT, CREDENTIAL, MAX_CHAIN, ORG, POLICY
from routing.config.validation_rules.catalogue import CatalogueRules
from routing.config.validation_rules.errors import FALLBACK, REFERENCE, VALUE, kind_of


class OrgRules(CatalogueRules):
    """The orgs section, after the catalogue it refers to."""

    def orgs(
        self, doc: Mapping[str, Any], providers: set[str], models: Mapping[str, Any], aliases: Mapping[str, Any]
    ) -> None:
        seen: dict[str, str] = {}
        for i, o in self.items(doc, "orgs", "orgs", "org"):
            path = f"orgs[{self.label(o, 'name', i)}]"
            what = f"org {o.get('name', i)!r}"
            self.fields(o, path, what, ORG.names, ORG.required)
            self.name(o, "name", path, "org", seen)
            self.values(o, path, what, ORG)
            self.agents(o, path, what, models, aliases)
            self.policies(o, path, what, models, aliases)
            self.credentials(o, path, what, providers)

    def agents(
        self, o: Mapping[str, Any], org_path: str, org: str, models: Mapping[str, Any], aliases: Mapping[str, Any]
    ) -> None:
        seen: dict[str, str] = {}
        for i, a in self.items(o, "agents", f"{org_path}.agents", "agent"):
            path = f"{org_path}.agents[{self.label(a, 'name', i)}]"
            what = f"agent {a.get('name', i)!r} of {org}"
            self.fields(a, path, what, AGENT.names, AGENT.required)
            self.name(a, "name", path, "agent", seen)
            self.values(a, path, what, AGENT)
            default = self.string(a, "default_model", path, what)
            if default and default not in models and default not in aliases:
                self.add(
                    f"{path}.default_model",
                    f"default_model {default!r} of {what} is neither a model id nor an alias: fix it or leave it empty",
                    REFERENCE,
                )

    def policies(
        self, o: Mapping[str, Any], org_path: str, org: str, models: Mapping[str, Any], aliases: Mapping[str, Any]
    ) -> None:
        listed = o.get("policies")
        if isinstance(listed, list) and len(listed) > MAX_POLICIES:
            self.add(
                f"{org_path}.policies",
                f"{org} has {len(listed)} policies; at most {MAX_POLICIES} are allowed: "
                "merge them with patterns such as 'gpt-*'",
                VALUE,
            )
            return
        for i, p in self.items(o, "policies", f"{org_path}.policies", "policy"):
            path = f"{org_path}.policies[{i}]"
            what = f"policy {i} ({p.get('pattern')!r}) of {org}"
            self.fields(p, path, what, POLICY.names, POLICY.required)
            self.values(p, path, what, POLICY)
            action = p.get("action")
            chain = p.get("fallback_chain")
            if chain is None:
                continue
            chain_path = f"{path}.fallback_chain"
            if action == "deny":
                self.add(
                    chain_path,
                    f"{what} is a deny policy with a fallback_chain: remove it, only allow policies replace the chain",
                    FALLBACK,
                )
            elif not isinstance(chain, list):
                self.add(
                    chain_path,
                    f"fallback_chain of {what} must be a list of model ids (empty disables fallback), got {kind_of(chain)}",
                )
            else:
                if len(chain) > MAX_CHAIN:
                    self.add(
                        chain_path,
                        f"fallback_chain of {what} has {len(chain)} links; at most {MAX_CHAIN} are allowed: shorten it",
                        FALLBACK,
                    )
                for j, target in enumerate(chain):
                    self.hop(f"{chain_path}[{j}]", target, f"fallback_chain of {what}", models, aliases)

    def credentials(self, o: Mapping[str, Any], org_path: str, org: str, providers: set[str]) -> None:
        seen: set[str] = set()
        for i, c in self.items(o, "credentials", f"{org_path}.credentials", "credential"):
            path = f"{org_path}.credentials[{self.label(c, 'provider', i)}]"
            what = f"BYO credential {c.get('provider', i)!r} of {org}"
            self.fields(c, path, what, CREDENTIAL.names, CREDENTIAL.required)
            provider = self.string(c, "provider", path, what)
            if provider:
                if provider not in providers:
                    self.add(
                        f"{path}.provider",
                        f"{what} names unknown provider {provider!r}: define it under providers or fix the name",
                        REFERENCE,
                    )
                if provider in seen:
                    self.add(f"{path}.provider", f"{org} has two credentials for provider {provider!r}: keep one")
                seen.add(provider)
            self.values(c, path, what, CREDENTIAL)
