"""Cloud Functions entry point: initialise once, set global options, export the triggers."""

from firebase_admin import initialize_app
from firebase_functions import options

options.set_global_options(region="us-central1", max_instances=100)
initialize_app()

from counting.api.counters import create_counter, get_count, increment, reset_counter  # noqa: E402
from counting.api.rollup import rollup  # noqa: E402
from counting.api.sequences import configure_sequence, next_number, reset_sequence  # noqa: E402
from counting.api.trends import top_tags, track  # noqa: E402

__all__ = [
    "configure_sequence",
    "create_counter",
    "get_count",
    "increment",
    "next_number",
    "reset_counter",
    "reset_sequence",
    "rollup",
    "top_tags",
    "track",
]
