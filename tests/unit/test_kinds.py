"""The named choices: config.py lists the same names the types allow, and a value is one or not."""

from __future__ import annotations

from counting import config, kinds


def test_config_lists_the_names_the_kinds_allow() -> None:
    """config.py's strategies and windows are the kinds' names, in the same order."""
    assert config.STRATEGIES == kinds.STRATEGIES
    assert tuple(config.WINDOWS) == kinds.WINDOWS
    assert set(config.TRENDING_THRESHOLDS) == set(kinds.WINDOWS)


def test_a_value_is_a_member_only_when_equal_to_one_of_the_names() -> None:
    """Known strings come back as themselves; anything else is None."""
    assert kinds.member("strong", kinds.CONSISTENCIES) == "strong"
    for other in ("eventual", "Strong", "", None, 1, ["strong"]):
        assert kinds.member(other, kinds.CONSISTENCIES) is None
