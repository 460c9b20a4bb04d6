"""Real agent clients through a real gateway: Codex CLI (streamed Responses) and Claude Code (its
default session: every default tool, adaptive thinking, `role: "system"` turns inside `messages`,
`?beta=true` and `anthropic-beta`) each finish a two-turn shell task.

The clients are the npm packages pinned in tests/e2e/clients/package-lock.json, installed there by
`npm ci` (`.ci/run` does it first; without node and npm on the machine these tests are skipped
with that reason). The upstream is tools.mock.agents, which each client first completed its task
against directly: every failure here is the gateway's. The gateway's model ids differ from the
upstream's model names on purpose (a client keys its history by the `model` it is answered).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tools.mock.agents import COMMAND, THOUGHT, signature_of

CLIENTS = Path(__file__).resolve().parent / "clients"
BIN = CLIENTS / "node_modules" / ".bin"
PROOF = "switchboard-agent-ok"
RUN_TIMEOUT_S = 180

CONFIG = """
resilience:
  max_retries: 0
providers:
  - name: agent-openai
    dialect: openai
    base_url: {mock}/agent/v1
  - name: agent-anthropic
    dialect: anthropic
    base_url: {mock}/agent/anthropic/v1
models:
  - id: codex-gw
    provider: agent-openai
    upstream_model: gpt-agent-up
    capabilities: [chat, responses, streaming, tools]
    context_window: 200000
  - id: claude-gw
    provider: agent-anthropic
    upstream_model: claude-agent-up
    capabilities: [chat, responses, streaming, tools, vision, reasoning]
    context_window: 200000
  - id: chat-gw
    provider: agent-openai
    upstream_model: chat-agent-up
    capabilities: [chat, streaming, tools, reasoning]
    context_window: 200000
  - id: plain-gw
    provider: agent-openai
    upstream_model: plain-agent-up
    capabilities: [chat, streaming, tools]
    context_window: 200000
orgs:
  - name: acme
    agents:
      - name: bot
"""


@pytest.fixture(scope="session")
def agent_bin() -> Path:
    """The pinned clients' bin directory, installed with `npm ci` when missing."""
    if not ((BIN / "codex").exists() and (BIN / "claude").exists()):
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("needs node and npm to install the pinned agent clients (apt-get install nodejs npm)")
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"], cwd=CLIENTS, check=True, timeout=900, capture_output=True
        )
    return BIN


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream):
    return make_gateway(CONFIG.format(mock=mock_upstream.url))


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="switchboard-agent-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def agent_calls(mock_url: str) -> list[dict]:
    return httpx.get(f"{mock_url}/agent/_calls", timeout=10).json()["requests"]


def reset_calls(mock_url: str) -> None:
    httpx.post(f"{mock_url}/agent/_reset", timeout=10).raise_for_status()


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TERM")}
    done = subprocess.run(
        argv,
        cwd=cwd,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    return done


def run_claude(agent_bin: Path, gw, mock_upstream, workdir: Path, model: str) -> None:
    """Claude Code, non-interactive with its default tools (Bash allowed), on `model`: it wrote the proof
    file with the mock's command and printed the mock's answer quoting the command's output."""
    reset_calls(mock_upstream.url)
    home = workdir / "home"
    home.mkdir()
    env = {
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": gw.url,
        "ANTHROPIC_AUTH_TOKEN": gw.api_key,
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_SMALL_FAST_MODEL": model,
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    done = run([str(agent_bin / "claude"), "-p", "Write the proof file.", "--allowedTools", "Bash"], workdir, env)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert (workdir / "proof.txt").read_text().strip() == PROOF, output  # the client ran the mock's command
    assert f"The command printed: {PROOF}" in done.stdout


def run_codex(agent_bin: Path, gw, mock_upstream, workdir: Path, model: str, reasoning: bool = False) -> str:
    """Codex CLI `exec` on `model` over streamed Responses: it wrote the proof file; its standard output."""
    reset_calls(mock_upstream.url)
    project = workdir / "project"
    project.mkdir()
    env = {
        "HOME": str(workdir),
        "CODEX_HOME": str(codex_home(workdir, gw.url, model, reasoning)),
        "SWITCHBOARD_API_KEY": gw.api_key,
    }
    argv = [str(agent_bin / "codex"), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
    done = run([*argv, "Write the proof file."], project, env)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert (project / "proof.txt").read_text().strip() == PROOF, output
    assert PROOF in done.stdout
    return done.stdout


def test_claude_code_default_session_runs_a_bash_task_on_an_anthropic_passthrough_link(
    agent_bin, gw, mock_upstream, workdir
):
    run_claude(agent_bin, gw, mock_upstream, workdir, "claude-gw")

    turns = [c for c in agent_calls(mock_upstream.url) if c["path"] == "/agent/anthropic/v1/messages"]
    first, second = turns[-2], turns[-1]
    assert first["query"] == "beta=true" and "claude-code" in first["headers"].get("anthropic-beta", "")
    body = first["body"]
    assert body["model"] == "claude-agent-up"
    assert "system" in [m["role"] for m in body["messages"]]  # a system turn inside messages went up as sent
    assert {"Bash", "Agent", "Read", "Write", "Edit"} <= {t["name"] for t in body["tools"]}  # the default tools
    assert body["thinking"]["type"] == "adaptive" and "context_management" in body and "output_config" in body
    # turn 2 still carries turn 1's thinking block with its signature, and the tool's output
    assistant = [m for m in second["body"]["messages"] if m["role"] == "assistant"][-1]
    thinking = [b for b in assistant["content"] if b.get("type") == "thinking"]
    assert thinking and thinking[0]["signature"] == signature_of(THOUGHT), assistant
    assert any(b.get("type") == "tool_use" and b["input"]["command"] == COMMAND for b in assistant["content"])
    assert PROOF in str(second["body"]["messages"][-1]["content"])


def codex_home(workdir: Path, gateway_url: str, model: str, reasoning: bool = False) -> Path:
    """Codex's configuration: the gateway as its one provider; with `reasoning`, a reasoning effort and
    summaries asked for (Codex sends `reasoning` only for models it knows reason, or when told)."""
    home = workdir / "codex-home"
    home.mkdir()
    asks = 'model_reasoning_effort = "high"\nmodel_supports_reasoning_summaries = true\n' if reasoning else ""
    (home / "config.toml").write_text(
        asks + f'model = "{model}"\n'
        'model_provider = "switchboard"\n'
        "[model_providers.switchboard]\n"
        'name = "Switchboard"\n'
        f'base_url = "{gateway_url}/v1"\n'
        'env_key = "SWITCHBOARD_API_KEY"\n'
        'wire_api = "responses"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
    )
    return home


def test_codex_runs_a_shell_task_over_streamed_responses_on_an_openai_link(agent_bin, gw, mock_upstream, workdir):
    assert "The command printed:" in run_codex(agent_bin, gw, mock_upstream, workdir, "codex-gw")

    turns = [c for c in agent_calls(mock_upstream.url) if c["path"] == "/agent/v1/responses"]
    first, second = turns[-2], turns[-1]
    assert first["body"]["stream"] is True and first["body"]["model"] == "gpt-agent-up"
    # turn 2 echoes turn 1's reasoning item (encrypted content intact), the call and its output
    items = second["body"]["input"]
    reasoning = [i for i in items if i.get("type") == "reasoning"]
    assert reasoning and reasoning[-1]["encrypted_content"] == signature_of(THOUGHT)
    calls = [i for i in items if i.get("type") == "function_call"]
    assert calls and calls[-1]["name"] == "exec_command"
    outputs = [i for i in items if i.get("type") == "function_call_output"]
    assert outputs and PROOF in str(outputs[-1]["output"])


def test_claude_code_runs_a_bash_task_on_an_openai_chat_link(agent_bin, gw, mock_upstream, workdir):
    run_claude(agent_bin, gw, mock_upstream, workdir, "chat-gw")
    turns = [c for c in agent_calls(mock_upstream.url) if c["path"] == "/agent/v1/chat/completions"]
    first, second = turns[-2], turns[-1]
    assert first["body"]["model"] == "chat-agent-up" and first["body"]["stream"] is True
    assert "system" in [m["role"] for m in first["body"]["messages"]]  # system turns mapped in place
    assert "Bash" in {t["function"]["name"] for t in first["body"]["tools"]}
    assert second["body"]["messages"][-1]["role"] == "tool" and PROOF in str(second["body"]["messages"][-1])
    # its adaptive thinking's effort went up as reasoning_effort; the mock's reasoning came back as an unsigned
    # thinking block, which Claude Code took (it finished the task) and which no upstream got back
    assert first["body"]["reasoning_effort"] == "high"
    assert THOUGHT not in str(second["body"]["messages"])


@pytest.mark.parametrize(
    ("model", "path"), [("claude-gw", "/agent/anthropic/v1/messages"), ("chat-gw", "/agent/v1/chat/completions")]
)
def test_codex_runs_a_shell_task_on_a_translated_link(agent_bin, gw, mock_upstream, workdir, model, path):
    out = run_codex(agent_bin, gw, mock_upstream, workdir, model, reasoning=True)
    turns = [c for c in agent_calls(mock_upstream.url) if c["path"] == path]
    assert len(turns) >= 2 and all(t["body"]["stream"] is True for t in turns[-2:])
    # Codex's reasoning effort reached the upstream (a thinking budget, or reasoning_effort); the reasoning came
    # back as a reasoning item, which Codex echoed on turn 2 (it finished the task) and no upstream got back
    first, second = turns[-2]["body"], turns[-1]["body"]
    assert first.get("reasoning_effort") == "high" or first["thinking"]["type"] == "enabled", out
    assert THOUGHT not in str(second)


def test_claude_code_runs_on_a_chat_model_that_cannot_reason(agent_bin, gw, mock_upstream, workdir):
    """Claude Code always sends `thinking`; a model without `reasoning` (the mock answers 400 to
    `reasoning_effort` for it, as gpt-4o does) gets none, and the task still finishes."""
    run_claude(agent_bin, gw, mock_upstream, workdir, "plain-gw")
    turns = [c for c in agent_calls(mock_upstream.url) if c["path"] == "/agent/v1/chat/completions"]
    first, second = turns[-2]["body"], turns[-1]["body"]
    assert first["model"] == "plain-agent-up" and "reasoning_effort" not in first
    assert second["messages"][-1]["role"] == "tool" and PROOF in str(second["messages"][-1])


def test_codex_runs_on_a_chat_model_that_cannot_reason(agent_bin, gw, mock_upstream, workdir):
    out = run_codex(agent_bin, gw, mock_upstream, workdir, "plain-gw", reasoning=True)
    turns = [c for c in agent_calls(mock_upstream.url) if c["path"] == "/agent/v1/chat/completions"]
    assert len(turns) >= 2 and not any("reasoning_effort" in t["body"] for t in turns[-2:]), out
    assert PROOF in str(turns[-1]["body"]["messages"][-1])
