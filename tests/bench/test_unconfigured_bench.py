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
