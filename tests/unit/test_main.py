"""main.py only wires: it exports exactly the deployed functions."""

from __future__ import annotations

import main

# The rollup's task queue functions, one per partition index: rolluptick, rolluptick1, ...,
# rolluptick15 (counting/writepath/partitions.py).
TICKS = {"rolluptick", *(f"rolluptick{index}" for index in range(1, 16))}
EXPECTED = {
    "configure_counter",
    "create_counter",
    "increment",
    "get_count",
    "reset_counter",
    "rollup",
    *TICKS,
    "configure_sequence",
    "next_number",
    "reset_sequence",
    "track",
    "top_tags",
    "count_orders",
    "count_posts_comments",
    "count_pages_counter_shards",
}


def test_main_exports_exactly_the_functions() -> None:
    """main.__all__ lists every trigger and nothing else."""
    assert set(main.__all__) == EXPECTED
    for name in EXPECTED:
        assert callable(getattr(main, name))
