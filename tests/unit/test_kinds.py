"""The named choices: config.py's per-window tables cover every window, and a value is one of
the names or not."""

from __future__ import annotations

from counting.foundation import config, kinds


def test_every_window_has_its_buckets_and_threshold() -> None:
    """mypy checks that the tables' keys are windows, not that every window is there."""
    assert set(config.WINDOW_BUCKETS) == set(config.TRENDING_THRESHOLDS) == set(kinds.WINDOWS)


def test_a_value_is_a_member_only_when_equal_to_one_of_the_names() -> None:
    """Known strings come back as themselves; anything else is None."""
    assert kinds.member("strong", kinds.CONSISTENCIES) == "strong"
    for other in ("eventual", "Strong", "", None, 1, ["strong"]):
        assert kinds.member(other, kinds.CONSISTENCIES) is None
