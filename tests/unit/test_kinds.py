"""The named choices: a value is one of them or not."""

from __future__ import annotations

from counting import kinds


def test_a_value_is_a_member_only_when_equal_to_one_of_the_names() -> None:
    """Known strings come back as themselves; anything else is None."""
    assert kinds.member("strong", kinds.CONSISTENCIES) == "strong"
    for other in ("eventual", "Strong", "", None, 1, ["strong"]):
        assert kinds.member(other, kinds.CONSISTENCIES) is None
