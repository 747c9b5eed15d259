"""Security rules for a local Firestore emulator that serves more than one database.

A deploy releases each database's rules file (firebase.json's `firestore` list). The Firestore
emulator loads the one file of a single database itself, but none at all once firebase.json
lists several: every read and write is then allowed, in the host's database too (firebase-tools
15.34: "Cloud Firestore Emulator does not support multiple databases yet"). `load` gives each
database its file through the emulator's own endpoint. main.py calls it when the Functions
emulator discovers the codebase, which it does at every start and after every change of the
codebase's files, so a host's stack enforces every database's rules with no step of its own;
`counters emulator-rules` calls it by hand (after an edit of a rules file outside the codebase).

No dependency beyond the standard library: the operator CLI's wheel uses it too.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from counting.foundation import config

# firebase.json is in the codebase's folder's parent (an install's, this repository's
# functions/), or a few folders further up when firebase.json names a deeper source.
MAX_LEVELS = 4
TIMEOUT_S = 30.0


class RulesNotLoaded(RuntimeError):
    """The emulator refused a rules file (its message says why), or could not be reached."""


def project_root(codebase: Path) -> Path | None:
    """The folder of the firebase.json nearest above `codebase`, if any."""
    for folder in list(codebase.resolve().parents)[:MAX_LEVELS]:
        if (folder / "firebase.json").is_file():
            return folder
    return None


def databases(root: Path) -> list[tuple[str, Path]]:
    """Each database firebase.json deploys rules to, with its rules file (a deploy target's
    entry names no database and is left out)."""
    entry: Any = json.loads((root / "firebase.json").read_text()).get("firestore")
    entries = entry if isinstance(entry, list) else [entry] if isinstance(entry, dict) else []
    return [(store.get("database", config.DEFAULT_DATABASE), root / store["rules"])
            for store in entries
            if isinstance(store, dict) and "rules" in store and "target" not in store]


def load(root: Path, emulator_host: str, project: str) -> list[str]:
    """Put each database's rules file of the project in `root` into the Firestore emulator at
    `emulator_host`; returns the databases loaded. RulesNotLoaded when the emulator refuses
    one."""
    loaded = []
    for database, rules in databases(root):
        body = json.dumps({"rules": {"files": [
            {"name": str(rules.relative_to(root)), "content": rules.read_text()}]}}).encode()
        request = urllib.request.Request(
            f"http://{emulator_host}/emulator/v1/projects/{project}/databases/{database}"
            ":securityRules", data=body, method="PUT",
            headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S):
                loaded.append(database)
        except urllib.error.HTTPError as error:
            raise RulesNotLoaded(f"the Firestore emulator refused {rules} for database "
                                 f"{database}: {error.read()[:2000].decode(errors='replace')}"
                                 ) from None
        except OSError as error:
            raise RulesNotLoaded(f"no Firestore emulator at {emulator_host} to load {rules} "
                                 f"into: {error}") from None
    return loaded


def load_for_emulated_codebase(codebase: Path, env: Mapping[str, str]) -> list[str]:
    """When the Functions emulator discovers this codebase (FUNCTIONS_EMULATOR set, no
    FUNCTION_TARGET: a worker serving a function has one) beside a Firestore emulator, and its
    project's firebase.json lists more than one database (with one, the emulator loads and
    reloads its rules itself): load every database's rules. Returns the databases loaded."""
    host = env.get("FIRESTORE_EMULATOR_HOST")
    if env.get("FUNCTIONS_EMULATOR") != "true" or env.get("FUNCTION_TARGET") or not host:
        return []
    root = project_root(codebase)
    if root is None or len(databases(root)) < 2:
        return []
    return load(root, host, env.get("GCLOUD_PROJECT", ""))
