"""The configuration file's bounds (docs/security.md#identifiers): size and nesting depth refused before
libyaml builds the document, bad encodings and shapes as a clean list of errors, never a crash."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management.base import CommandError

from providers.models import Model
from routing.config.store import MAX_YAML_BYTES, MAX_YAML_DEPTH, ConfigInvalid, dump_yaml, load_yaml
from tests.config.test_import_export import run_import

ROOT = Path(__file__).resolve().parents[2]


def test_import_config_of_100_000_nested_flow_sequences_is_a_clean_error_not_a_crash(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("models: " + "[" * 100_000 + "]" * 100_000 + "\n")
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}
    out = subprocess.run(
        [sys.executable, "manage.py", "import_config", str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1, (out.returncode, out.stderr[-2000:])
    assert f"nested more than {MAX_YAML_DEPTH} levels deep at line 1" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "text",
    [
        "models:\n" + "".join(" " * (2 * i) + "- \n" for i in range(1, 80)),  # block sequences, one a line
        "models:\n" + "- " * 80 + "x\n",  # compact nested sequences on one line
        "a: " + "{b: " * 70 + "c" + "}" * 70 + "\n",
    ],
)
def test_block_and_flow_nesting_past_the_bound_is_refused(text):
    with pytest.raises(ConfigInvalid) as info:
        load_yaml(text, source="deep.yaml")
    assert f"more than {MAX_YAML_DEPTH} levels" in str(info.value)


def test_nesting_within_the_bound_loads():
    depth = MAX_YAML_DEPTH - 1
    assert load_yaml("a: " + "[" * depth + "]" * depth + "\n") == {"a": eval("[" * depth + "]" * depth)}  # noqa: S307


def test_a_document_over_the_size_bound_is_refused_unparsed():
    with pytest.raises(ConfigInvalid) as info:
        load_yaml("#" * (MAX_YAML_BYTES + 1))
    assert "larger than 10 MiB" in str(info.value)


@pytest.mark.django_db
def test_import_config_reads_no_further_than_the_bound(tmp_path):
    path = tmp_path / "big.yaml"
    with path.open("wb") as handle:
        handle.truncate(MAX_YAML_BYTES + 1)  # sparse: 10 MiB of NULs
    with pytest.raises(CommandError, match="larger than 10 MiB; nothing was changed"):
        _import(path)


@pytest.mark.django_db
def test_a_utf16_file_is_a_clean_error(tmp_path):
    path = tmp_path / "utf16.yaml"
    path.write_text("models: []\n", encoding="utf-16")
    with pytest.raises(CommandError, match="is not UTF-8 text"):
        _import(path)


@pytest.mark.django_db
def test_capabilities_as_a_list_of_lists_is_a_validation_error_naming_the_field(tmp_path, valid_doc):
    valid_doc["models"][1]["capabilities"] = [["chat", "streaming"]]
    with pytest.raises(CommandError) as info:
        run_import(tmp_path, dump_yaml(valid_doc))
    assert "models[chat-b].capabilities[0]: unknown capability ['chat', 'streaming']" in str(info.value)
    assert not Model.objects.exists()


def _import(path: Path) -> None:
    from django.core.management import call_command

    call_command("import_config", str(path))
