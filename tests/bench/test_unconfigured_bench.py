"""The unconfigured-features benchmark times each feature's off path, and refuses to time anything else (bench/unconfigured_bench.py)."""

from __future__ import annotations

import pytest

from bench import unconfigured_bench


@pytest.mark.django_db
def test_every_check_takes_its_feature_s_off_path_and_is_timed():
    best = unconfigured_bench.measure(number=200, repeat=1)
    assert set(best) == {feature for feature, _, _ in unconfigured_bench.CHECKS}
    assert all(ns >= 0.0 for ns in best.values())  # a time, less the empty statement's: never negative


@pytest.mark.django_db
def test_a_check_that_does_not_take_the_off_path_voids_the_run(monkeypatch):
    """A configured feature (here: a rate limit on the caller) is not what this benchmark may report."""
    checks = (("rate limits", "limiting.admit(limiter, ctx, key, model, req)", "app.py"), ("always on", "1", "x"))
    monkeypatch.setattr(unconfigured_bench, "CHECKS", checks)
    with pytest.raises(SystemExit, match="always on: 1 gave 1, not the off path"):
        unconfigured_bench.measure(number=10, repeat=1)


def test_the_command_runs_on_its_own_outside_a_serving_process(tmp_path):
    """make bench runs it as a command, where no test fixture has installed a process: it once stopped there
    with 'no serving process is installed' and the row read 'not measured'."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "SWITCHBOARD_BENCH_RUN_DIR": str(tmp_path), "DATABASE_URL": f"sqlite:///{tmp_path}/db"}
    done = subprocess.run(
        [sys.executable, "-m", "bench.unconfigured_bench", "--number", "100", "--repeat", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "rate limits" in done.stdout and (tmp_path / "unconfigured.json").exists()
