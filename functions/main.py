"""Cloud Functions entry point: initialise once, set the runtime options, export the triggers.

The global options are the callables' (each one is I/O-bound: a few Firestore round trips):
one whole vCPU, so that an instance may serve requests concurrently (set_global_options would
otherwise default to the first generation's 1/6 vCPU and one request per instance), 80 at once
(the Cloud Run default, and far more than one vCPU does in Python with this little CPU per
request), 512 MiB for the clients plus 80 requests' payloads, 60 s (a callable does at most a few
Firestore calls; a stuck one fails instead of holding an instance), no minimum instance (idle
costs nothing; the first call after a long idle pays a cold start) and at most 100 instances (a
cap on what a flood of clients can cost). The collection counters' document triggers take them
too (handlers/collections.py). The rollup's functions set their own
(handlers/rollup.py). tests/unit/test_manifest.py pins them all.

Before anything else, the codebase's placement (placement.json beside this file: where its data
lives, which prefix its function ids have) is read (`handlers.placement`, which the handlers'
clients and context are made from); without the file the functions refuse to start rather than
write to default collections (counting/foundation/config.py). Under the Functions emulator,
every database's rules are loaded into the Firestore emulator, which loads none once
firebase.json lists several (counting/foundation/emulator_rules.py).
"""

import logging
import os

from counting.foundation import config, emulator_rules
from firebase_admin import initialize_app
from firebase_functions import options
from handlers import CODEBASE, placement

placement()  # first: without placement.json, nothing below runs
emulator_rules.load_for_emulated_codebase(CODEBASE, os.environ)

options.set_global_options(
    region=config.REGION,
    cpu=1,
    memory=options.MemoryOption.MB_512,
    concurrency=config.CALLABLE_CONCURRENCY,
    timeout_sec=60,
    min_instances=0,
    max_instances=100,
)
initialize_app()

from handlers import cloud_logging  # noqa: E402
from handlers.collections import TRIGGERS  # noqa: E402
from handlers.counters import (  # noqa: E402
    configure_counter,
    create_counter,
    get_count,
    increment,
    reset_counter,
)
from handlers.rollup import TICKS, rollup  # noqa: E402
from handlers.sequences import configure_sequence, next_number, reset_sequence  # noqa: E402
from handlers.trends import top_tags, track  # noqa: E402

cloud_logging(logging.INFO)
# The collection counters' Firestore triggers (count_orders, count_posts_comments), one per path
# pattern of declarations.json: generated, so that adding a counter is adding a declaration.
globals().update(TRIGGERS)
# The rollup's tick functions (rolluptick, rolluptick1, ...), one per partition index.
globals().update(TICKS)

__all__ = [
    "configure_counter",
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
    *TRIGGERS,
    *TICKS,
]
