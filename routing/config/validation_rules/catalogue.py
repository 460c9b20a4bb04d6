"""What the gateway routes to: providers, models and their deployments, aliases and fallback chains.

The rules of docs/configuration.md and docs/deployments.md#validation: a provider's
dialect and region, a model's id, provider and capabilities, one deployment per provider
whose dialect serves the model's endpoint kinds, aliases that name models, and fallback
chains without unknown links, capability gaps or loops.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from routing.config.identifiers import identifier_problem
from routing.config.schema import CAPABILITIES, DEPLOYMENT, MAX_CHAIN, MODEL, PROVIDER
from routing.config.validation_rules.errors import (
    ALIAS,
    CAPABILITY,
    FALLBACK,
    REFERENCE,
    URL,
    VALUE,
    kind_of,
    short_repr,
)
from routing.config.validation_rules.problems import base_url_problem, bedrock_region_problem
from routing.config.validation_rules.values import ValueRules
from routing.core.kinds import DIALECT_KINDS, ENDPOINT_KINDS

_CAPABILITY_SET = frozenset(CAPABILITIES)


def endpoint_kinds(item: Mapping[str, Any]) -> set[str]:
    """The endpoint kinds (chat/embeddings/rerank/responses) a model item serves."""
    caps = item.get("capabilities")
    if not isinstance(caps, list):
        return set()
    return {c for c in caps if isinstance(c, str) and c in ENDPOINT_KINDS}


def fallback_cycles(models: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """Each loop of two or more models through their `fallbacks` (a model listing itself is reported
    apart), once, starting at the model that comes first in the document."""
    # Only models with fallbacks can be on a loop; the hops are filtered as the walk meets them.
    graph = {
        model_id: hops for model_id, m in models.items() if (hops := m.get("fallbacks")) and isinstance(hops, list)
    }
    order: dict[str, int] = {}  # document position, built at the first cycle (rare)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []
    for root in graph:
        if root in state:
            continue
        path, stack = [root], [iter(graph[root])]
        state[root] = 1
        while stack:
            target = next(stack[-1], None)
            if target is None:
                state[path.pop()] = 2
                stack.pop()
            elif not isinstance(target, str) or target == path[-1] or target not in graph:
                continue
            elif state.get(target) == 1:
                loop = path[path.index(target) :]
                order = order or {model_id: i for i, model_id in enumerate(models)}
                first = min(range(len(loop)), key=lambda i: order[loop[i]])
                cycles.append(loop[first:] + loop[:first])
            elif target not in state:
                state[target] = 1
                path.append(target)
                stack.append(iter(graph[target]))
    return cycles


class CatalogueRules(ValueRules):
    """The providers, models, aliases and chains sections."""

    def providers(self, doc: Mapping[str, Any]) -> set[str]:
        seen: dict[str, str] = {}
        for i, p in self.items(doc, "providers", "providers", "provider"):
            path = f"providers[{self.label(p, 'name', i)}]"
            what = f"provider {p.get('name', i)!r}"
            self.fields(p, path, what, PROVIDER.names, PROVIDER.required)
            name = self.name(p, "name", path, "provider", seen)
            self.values(p, path, what, PROVIDER)
            dialect = p.get("dialect", PROVIDER["dialect"].default)
            if name:
                self.dialects[name] = dialect if isinstance(dialect, str) else ""
            if dialect == "bedrock":
                self.bedrock_region(p, path, what)
        return set(seen)

    def bedrock_region(self, p: Mapping[str, Any], path: str, what: str) -> None:
        """A bedrock provider signs for one region, which its base_url must name (docs/providers.md#bedrock)."""
        url = p.get("base_url")
        if isinstance(url, str) and base_url_problem(url) is None and (problem := bedrock_region_problem(url)):
            self.add(f"{path}.base_url", f"base_url of {what} {problem}", URL)

    def models(self, doc: Mapping[str, Any], providers: set[str]) -> dict[str, dict[str, Any]]:
        seen: dict[str, str] = {}
        models: dict[str, dict[str, Any]] = {}
        for i, m in self.items(doc, "models", "models", "model"):
            path = f"models[{self.label(m, 'id', i)}]"
            what = f"model {m.get('id', i)!r}"
            self.fields(m, path, what, MODEL.names, MODEL.required)
            model_id = self.string(m, "id", path, what)
            if model_id:
                if model_id in seen:
                    self.add(f"{path}.id", f"duplicate model id {model_id!r}: ids must be unique, rename or remove one")
                elif problem := identifier_problem(model_id, "model id"):
                    self.add(f"{path}.id", problem, VALUE)
                elif model_id != model_id.strip():
                    self.add(f"{path}.id", f"model id {model_id!r} has surrounding spaces: remove them")
                seen[model_id] = path
                models.setdefault(model_id, m)
            if m.get("deployments") is None:  # the one-deployment shorthand (docs/deployments.md)
                for key in ("provider", "upstream_model"):
                    if m.get(key) in (None, ""):
                        self.add(f"{path}.{key}", f"{what} is missing the required field {key!r}: add it")
            provider = self.string(m, "provider", path, what)
            if provider and provider not in providers:
                self.add(
                    f"{path}.provider",
                    f"{what} names unknown provider {provider!r}: define it under providers or fix the name",
                    REFERENCE,
                )
            upstream = self.string(m, "upstream_model", path, what)
            self.check(f"{path}.upstream_model", identifier_problem(upstream, f"upstream_model of {what}"), VALUE)
            self.deployments(m, path, what, providers)
            if m.get("affinity") is not None and len(m.get("deployments") or ()) < 2:
                self.add(
                    f"{path}.affinity",
                    f"{what} has affinity but fewer than two deployments: affinity picks one of several "
                    "deployments; list its deployments or remove affinity",
                    VALUE,
                )
            self.string(m, "residency", path, what)
            caps = m.get("capabilities")
            if caps is not None:
                if not isinstance(caps, list):
                    self.add(
                        f"{path}.capabilities",
                        f"capabilities of {what} must be a list such as [chat, streaming], got {kind_of(caps)}",
                    )
                else:
                    for j, cap in enumerate(caps):
                        if not isinstance(cap, str) or cap not in _CAPABILITY_SET:
                            self.add(
                                f"{path}.capabilities[{j}]",
                                f"unknown capability {cap!r} of {what}: use one of {', '.join(CAPABILITIES)}",
                                CAPABILITY,
                            )
            self.values(m, path, what, MODEL)
            fallbacks = m.get("fallbacks")
            if fallbacks is not None and not isinstance(fallbacks, list):
                self.add(
                    f"{path}.fallbacks", f"fallbacks of {what} must be a list of model ids, got {kind_of(fallbacks)}"
                )
        return models

    def deployments(self, m: Mapping[str, Any], model_path: str, model: str, providers: set[str]) -> None:
        """A model's `deployments` (docs/deployments.md#validation): known providers, one per provider,
        positive weight and capacity, a dialect that serves the model's endpoint kinds."""
        value = m.get("deployments")
        if value is None:
            return
        path = f"{model_path}.deployments"
        for key in ("provider", "upstream_model"):
            if m.get(key) not in (None, ""):
                self.add(
                    f"{model_path}.{key}",
                    f"{model} gives both {key!r} and deployments: the provider + upstream_model shorthand is one "
                    "deployment; move it into deployments or remove the deployments list",
                )
        if isinstance(value, list) and not value:
            self.add(path, f"deployments of {model} is empty: list at least one, or use provider + upstream_model")
            return
        kinds = endpoint_kinds(m)
        seen: set[str] = set()
        for i, d in self.items(m, "deployments", path, "deployment"):
            label = self.label(d, "provider", i)
            d_path = f"{path}[{label}]"
            what = f"deployment {label!r} of {model}"
            self.fields(d, d_path, what, DEPLOYMENT.names, DEPLOYMENT.required)
            provider = self.string(d, "provider", d_path, what)
            upstream = self.string(d, "upstream_model", d_path, what)
            self.check(f"{d_path}.upstream_model", identifier_problem(upstream, f"upstream_model of {what}"), VALUE)
            self.values(d, d_path, what, DEPLOYMENT)
            if not provider:
                continue
            if provider in seen:
                self.add(
                    f"{d_path}.provider",
                    f"{model} has two deployments on provider {provider!r}: at most one per provider, keep one",
                )
            seen.add(provider)
            if provider not in providers:
                self.add(
                    f"{d_path}.provider",
                    f"{what} names unknown provider {provider!r}: define it under providers or fix the name",
                    REFERENCE,
                )
                continue
            dialect = self.dialects.get(provider, "")
            cannot = sorted(kinds - DIALECT_KINDS.get(dialect, frozenset(kinds)))
            if cannot:
                self.add(
                    f"{d_path}.provider",
                    f"{what}: provider {provider!r} speaks the {dialect} dialect, which cannot serve "
                    f"{', '.join(cannot)} that the model serves: choose a provider whose dialect serves it",
                    CAPABILITY,
                )

    def aliases(self, doc: Mapping[str, Any], models: Mapping[str, Any]) -> dict[str, Any]:
        aliases = doc.get("aliases")
        if aliases is None or not self.mapping(aliases, "aliases", "aliases"):
            return {}
        for name, target in aliases.items():
            path = f"aliases[{name}]"
            if not isinstance(name, str) or not name or not isinstance(target, str) or not target:
                self.add(path, f"alias {name!r} must map a name to a model id string, got {short_repr(target)}")
            elif problem := identifier_problem(name, "alias"):
                self.add(path, problem, ALIAS)
            elif name in models:
                self.add(path, f"alias {name!r} has the same name as a model id: rename the alias", ALIAS)
            elif target in aliases and target not in models:
                self.add(
                    path,
                    f"alias {name!r} points to the alias {target!r}: an alias target must be a model id, point it at one",
                    ALIAS,
                )
            elif target not in models:
                self.add(
                    path,
                    f"alias {name!r} points to unknown model {target!r}: define the model or fix the target",
                    ALIAS,
                )
        return dict(aliases)

    def hop(self, path: str, target: Any, owner: str, models: Mapping[str, Any], aliases: Mapping[str, Any]) -> bool:
        """One model id of a chain; reports a non-id and returns whether it is a known model."""
        if not isinstance(target, str):
            self.add(path, f"{owner} must list model ids as strings, got {kind_of(target)}")
        elif target in models:
            return True
        elif target in aliases:
            self.add(
                path, f"{owner} names the alias {target!r}: chains list model ids, use {aliases[target]!r}", FALLBACK
            )
        else:
            self.add(
                path,
                f"{owner} names unknown model {target!r}: define it under models or remove it from the chain",
                FALLBACK,
            )
        return False

    def chains(self, models: Mapping[str, dict[str, Any]], aliases: Mapping[str, Any]) -> None:
        for model_id, m in models.items():
            fallbacks = m.get("fallbacks")
            if not isinstance(fallbacks, list):
                continue
            path = f"models[{model_id}].fallbacks"
            owner = f"the fallback chain of model {model_id!r}"
            if len(fallbacks) > MAX_CHAIN:
                self.add(
                    path, f"{owner} has {len(fallbacks)} links; at most {MAX_CHAIN} are allowed: shorten it", FALLBACK
                )
            kinds = endpoint_kinds(m)
            seen: set[str] = set()
            for j, target in enumerate(fallbacks):
                hop_path = f"{path}[{j}]"
                if target == model_id:
                    self.add(hop_path, f"model {model_id!r} lists itself as a fallback: remove it", FALLBACK)
                elif isinstance(target, str) and target in seen:
                    self.add(hop_path, f"{target!r} appears twice in {owner}: remove the duplicate", FALLBACK)
                elif self.hop(hop_path, target, owner, models, aliases):
                    missing = sorted(kinds - endpoint_kinds(models[target]))
                    if missing:
                        self.add(
                            hop_path,
                            f"fallback {target!r} does not serve {', '.join(missing)}, which model {model_id!r} serves: "
                            f"add the capability to {target!r} or choose a fallback that has it",
                            CAPABILITY,
                        )
                if isinstance(target, str):
                    seen.add(target)
        for cycle in fallback_cycles(models):
            self.add(
                f"models[{cycle[0]}].fallbacks",
                f"fallback cycle {' -> '.join([*cycle, cycle[0]])}: these models fall back to one another in a "
                "loop, so none of them is the last resort; remove one of these links",
                FALLBACK,
            )
