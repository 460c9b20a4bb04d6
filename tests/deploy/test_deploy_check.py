"""deploy/check (docs/production.md#checks): the script stays strict, bounded and pinned, and its
Kubernetes schema validation passes the manifests and fails a broken copy of them.

The validation needs the check tools that `deploy/check` installs into var/deploy-check-venv
(from PyPI, so not here): without them these tests skip on a developer's machine and fail in
CI, where `deploy/check` runs before the test suite. Nothing here uses the network."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "deploy" / "check"
TOOLS = ROOT / "deploy" / "requirements-check.txt"
VENV = ROOT / "var" / "deploy-check-venv"


def test_the_script_is_strict_and_bounds_every_tool_with_a_timeout():
    text = CHECK.read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env bash\n") and "\nset -euo pipefail\n" in text
    assert os.access(CHECK, os.X_OK), "deploy/check must be executable"
    assert re.search(r"^KUBERNETES_VERSION=\d+\.\d+\.\d+\b", text, re.M), "validate against one named version"
    assert "strict=True" in text
    tool = re.compile(r'"\$VENV/bin/[\w-]+"|\bmmdebstrap\b|\bpodman (?:build|import)\b|\bapt-get\b|\bchroot\b')
    calls = [
        (line, match)
        for line in text.splitlines()
        if not line.lstrip().startswith(("#", "echo ")) and "command -v" not in line
        for match in tool.finditer(line)
    ]
    assert len(calls) >= 10, calls  # every tool the steps run: pip, the checks, apt-get, mmdebstrap, podman, chroot
    for line, match in calls:
        assert "timeout " in line[: match.start()], f"unbounded: {line.strip()}"
    assert "--ignore-vuln" not in text, "an ignored vulnerability needs its reason in docs/production.md#checks"


def test_the_check_tools_are_pinned_with_hashes():
    text = TOOLS.read_text(encoding="utf-8")
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\$", text, re.M))
    assert {"kubernetes-validate", "cyclonedx-bom", "pip-audit"} <= set(pins), pins
    blocks = re.split(r"\n(?=[A-Za-z0-9])", "\n".join(ln for ln in text.splitlines() if not ln.startswith("#")))
    assert all("--hash=sha256:" in block for block in blocks if "==" in block)
    assert "--require-hashes" in CHECK.read_text(encoding="utf-8")


def validate(folder: Path) -> subprocess.CompletedProcess[str]:
    if not (VENV / ".installed").is_file():
        message = f"{VENV} is missing: run deploy/check first (it installs deploy/requirements-check.txt)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    env = dict(os.environ, DEPLOY_CHECK_K8S_DIR=str(folder), DEPLOY_CHECK_NO_INSTALL="1")
    return subprocess.run(
        [str(CHECK), "--only", "manifests"], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_manifests_are_valid_against_the_kubernetes_schemas():
    run = validate(ROOT / "deploy" / "k8s")
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"(\d+) of \1 documents valid against Kubernetes", run.stdout), run.stdout


def test_a_misspelt_field_or_an_unknown_kind_fails_the_validation(tmp_path):
    shutil.copytree(ROOT / "deploy" / "k8s", tmp_path, dirs_exist_ok=True)
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(deployment.read_text().replace("readinessProbe:", "readinesProbe:"))
    service = tmp_path / "service.yaml"
    service.write_text(service.read_text().replace("kind: Service", "kind: Servise"))
    run = validate(tmp_path)
    assert run.returncode != 0, run.stdout
    assert "deployment.yaml Deployment/switchboard" in run.stdout and "'readinesProbe' was unexpected" in run.stdout
    assert "service.yaml Servise/switchboard" in run.stdout and "Couldn't find schema" in run.stdout
    assert "manifests: FAILED" in run.stderr
