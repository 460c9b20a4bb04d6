"""deploy/: every YAML parses, and the container build, compose file and Kubernetes manifests
keep their essentials — non-root, hash-pinned, health-checked on /health, one image everywhere,
migrations before serving, the configuration valid — and docs/production.md names every
environment variable the settings read. No image is built here (docs/production.md#image)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from routing.config.validation import validate_document

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]


def manifests() -> list[dict[str, Any]]:
    """The cluster resources (the kustomization is a build file, not one of them)."""
    return [doc for path in sorted(K8S.glob("*.yaml")) for doc in documents(path) if doc["kind"] != "Kustomization"]


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in manifests() if doc.get("kind") == kind]


def pod_specs() -> list[dict[str, Any]]:
    return [doc["spec"]["template"]["spec"] for doc in manifests() if doc.get("kind") in ("Deployment", "Job")]


def test_every_yaml_in_deploy_parses():
    found = sorted(DEPLOY.rglob("*.yaml"))
    assert len(found) >= 8, found
    for path in found:
        assert documents(path), f"{path} is empty"


def test_the_kubernetes_manifests_have_every_part_of_a_deployment():
    kinds = {doc["kind"] for doc in manifests()}
    assert {"Deployment", "Job", "ConfigMap", "Service", "PodDisruptionBudget", "Secret"} <= kinds
    for doc in manifests():
        assert doc.get("apiVersion") and doc.get("metadata", {}).get("name"), doc
    (kustomization,) = documents(K8S / "kustomization.yaml")
    applied = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}
    assert set(kustomization["resources"]) == applied  # the Secret is the operator's own


def test_the_gateway_is_probed_on_health_and_runs_as_a_non_root_user():
    (deployment,) = of_kind("Deployment")
    spec = deployment["spec"]["template"]["spec"]
    (gateway,) = spec["containers"]
    port_names = {p["name"]: p["containerPort"] for p in gateway["ports"]}
    for probe in ("readinessProbe", "livenessProbe"):
        check = gateway[probe]["httpGet"]
        assert check["path"] == "/health" and check["port"] in (*port_names, *port_names.values()), probe
    assert gateway["args"][0] == "serve" and "0.0.0.0" in gateway["args"]
    for pod in pod_specs():
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] > 0
        for container in pod.get("initContainers", []) + pod["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False and context["readOnlyRootFilesystem"] is True
            mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
            assert {"/app/var", "/tmp"} <= mounts, f"{container['name']}: a read-only root needs var/ and /tmp"


def test_one_image_everywhere_and_new_pods_wait_for_the_migration_job():
    images = {c["image"] for pod in pod_specs() for c in pod.get("initContainers", []) + pod["containers"]}
    assert len(images) == 1, images
    (job,) = of_kind("Job")
    (migrate,) = job["spec"]["template"]["spec"]["containers"]
    assert "manage.py migrate" in " ".join(migrate["args"]) and "import_config" in " ".join(migrate["args"])
    (deployment,) = of_kind("Deployment")
    waits = deployment["spec"]["template"]["spec"]["initContainers"]
    assert any("migrate --check" in " ".join(c["args"]) for c in waits)


def test_secrets_are_referenced_not_written_and_the_names_agree():
    (secret,) = of_kind("Secret")
    assert all(
        value.startswith(("replace", "postgres://switchboard:replace", "redis://"))
        for value in secret["stringData"].values()
    )
    for pod in pod_specs():
        for container in pod.get("initContainers", []) + pod["containers"]:
            refs = [e["valueFrom"]["secretKeyRef"] for e in container.get("env", []) if "valueFrom" in e]
            assert {r["name"] for r in refs} == {secret["metadata"]["name"]}
            assert {r["key"] for r in refs} == set(secret["stringData"])
            assert not [e for e in container.get("env", []) if "value" in e and "KEY" in e["name"]]


def test_selectors_match_the_pods_and_the_config_map_validates():
    (deployment,) = of_kind("Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    (service,) = of_kind("Service")
    (pdb,) = of_kind("PodDisruptionBudget")
    for selector in (
        deployment["spec"]["selector"]["matchLabels"],
        service["spec"]["selector"],
        pdb["spec"]["selector"]["matchLabels"],
    ):
        assert selector.items() <= labels.items(), selector
    (config,) = [c for c in of_kind("ConfigMap") if "switchboard.yaml" in c["data"]]
    document = yaml.safe_load(config["data"]["switchboard.yaml"])
    assert not validate_document(document)
    assert document == yaml.safe_load((DEPLOY / "switchboard.yaml").read_text()), (
        "ConfigMap and deploy/switchboard.yaml differ"
    )
    (env,) = [c for c in of_kind("ConfigMap") if "ALLOWED_HOSTS" in c["data"]]
    assert env["data"]["ALLOWED_HOSTS"] and env["data"]["CSRF_TRUSTED_ORIGINS"].startswith("https://")


def test_compose_migrates_before_the_gateway_serves():
    (compose,) = documents(DEPLOY / "compose.yaml")
    services = compose["services"]
    assert {"gateway", "postgres", "redis", "migrate"} <= set(services)
    gateway, migrate = services["gateway"], services["migrate"]
    assert gateway["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert gateway["image"] == migrate["image"] and gateway["build"]["dockerfile"] == "deploy/Containerfile"
    assert "migrate" in " ".join(migrate["command"]) and "import_config" in " ".join(migrate["command"])
    assert gateway["command"][0] == "serve" and "/health" in " ".join(gateway["healthcheck"]["test"])
    for name in ("SECRET_KEY", "ALLOWED_HOSTS"):
        assert ":?" in gateway["environment"][name], f"{name} must be required, not defaulted"


def test_the_container_build_is_multi_stage_hash_pinned_non_root_and_health_checked():
    text = (DEPLOY / "Containerfile").read_text()
    assert re.search(r"^ARG BASE=python:3\.12-slim$", text, re.M)
    assert len(re.findall(r"^FROM \$\{BASE\} AS \w+", text, re.M)) >= 2
    assert "--require-hashes" in text and "-r /tmp/requirements.lock" in text
    assert "COPY deploy/requirements.lock" in text
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and not user[-1].startswith(("0", "root"))
    assert re.search(r"^HEALTHCHECK .*\n?.*/health", text, re.M)
    assert re.search(r'^ENTRYPOINT \["python", "manage.py"\]', text, re.M) and re.search(r'^CMD \["serve"', text, re.M)


def pins(text: str) -> dict[str, str]:
    return {
        m[0].lower().replace("_", "-"): m[1]
        for m in re.findall(r"^([A-Za-z0-9_.\[\]-]+?)(?:\[[^\]]*\])?==(\S+)", text, re.M)
    }


def test_the_lock_pins_every_runtime_requirement_with_hashes():
    runtime = (ROOT / "requirements.txt").read_text().split("# Tests and tooling")[0]
    wanted = pins(runtime)
    assert pins((DEPLOY / "requirements.in").read_text()) == wanted, (
        "deploy/requirements.in is not requirements.txt's runtime part"
    )
    lock = (DEPLOY / "requirements.lock").read_text()
    locked = pins(lock)
    for name, version in wanted.items():
        assert locked.get(name) == version, f"{name}=={version} is not in deploy/requirements.lock: recompile it"
    body = "\n".join(line for line in lock.splitlines() if not line.startswith("#"))  # past pip-compile's header
    blocks = re.split(r"\n(?=[A-Za-z0-9])", body.strip())
    assert all("--hash=sha256:" in block for block in blocks if "==" in block)
    assert "pytest" not in locked and "ruff" not in locked


SETTING = re.compile(r"""env\.(?:str|bool|int|float|list|db)\(\s*"([A-Z0-9_]+)\"""")


@pytest.mark.parametrize("name", sorted(set(SETTING.findall((ROOT / "gateway_project" / "settings.py").read_text()))))
def test_the_production_guide_names_every_variable_the_settings_read(name):
    guide = (ROOT / "docs" / "production.md").read_text()
    row = next((line for line in guide.splitlines() if line.startswith(f"| `{name}`")), None)
    assert row is not None, f"docs/production.md has no row for {name}"
    assert row.count("|") >= 5, row  # variable | default | required | what
