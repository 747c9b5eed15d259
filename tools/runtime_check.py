"""The deploy check: the functions load, and a deploy would create each one, with nothing
installed but functions/requirements.txt.

functions/venv holds the dev tools beside the runtime, so a runtime dependency missing from
requirements.txt passes every other check there and fails only once deployed. `make
runtime-check` runs this with the python of a venv built from requirements.txt alone, in
functions/ (where the Functions runtime starts), with Firestore pointed at a closed port so that
nothing real is reached.
"""

from __future__ import annotations

import sys

import firebase_admin
import main
import yaml
from firebase_functions.private import serving


def check() -> int:
    """The number of functions in the deploy manifest; exits when an exported one is missing."""
    exported = set(main.__all__)
    # The SDK loads main.py afresh, as a deploy does, and main.py initialises the app again.
    firebase_admin.delete_app(firebase_admin.get_app())
    functions = serving.get_functions()  # type: ignore[no-untyped-call]  # untyped in the SDK
    manifest = yaml.safe_load(serving.functions_as_yaml(functions))
    endpoints = set(manifest["endpoints"])
    missing = sorted(exported - endpoints)
    if missing:
        sys.exit(f"runtime check: not in the deploy manifest: {', '.join(missing)}")
    return len(endpoints)


if __name__ == "__main__":
    print(f"runtime check: main imports with the runtime requirements only; "
          f"the deploy manifest lists {check()} functions")
