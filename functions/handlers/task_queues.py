"""Who may enqueue a task queue function: its `invoker` in the deploy manifest.

firebase-functions 0.6.0 accepts `invoker` on `tasks_fn.on_task_dispatched` but leaves it out of
the manifest's `taskQueueTrigger`, and firebase-tools grants the Cloud Tasks enqueuer role on the
queue and the Cloud Run invoker role on the function only to the principals listed there.
`task_queue_invoker` writes the list into the endpoint the SDK built (docs/deploy.md says what
the deploy grants and checks). Drop it for the SDK's `invoker=` option once the SDK writes it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar, cast

from firebase_functions import params
from firebase_functions.private import manifest

TaskFunction = TypeVar("TaskFunction", bound=Callable[..., Any])

# The account the functions run as, which enqueues `rolluptick` tasks (the callables after a
# write, and the rollup's own functions) and which the Admin SDK names in each task's OIDC token,
# so that Cloud Tasks dispatches the task as it. The functions set no service account: it is the
# project's default compute account, PROJECT_NUMBER-compute@developer.gserviceaccount.com, which
# no built-in parameter names. `make deploy` writes it into functions/.env.<project>;
# functions/.env.local gives the emulators, which check no IAM, a stand-in.
RUNTIME_SERVICE_ACCOUNT = params.StringParam(
    "RUNTIME_SERVICE_ACCOUNT",
    description="The functions' runtime service account: the project's default compute "
                "account, PROJECT_NUMBER-compute@developer.gserviceaccount.com")


def task_queue_invoker(*principals: str | params.Expression[str],
                       ) -> Callable[[TaskFunction], TaskFunction]:
    """Declares who may enqueue the decorated `on_task_dispatched` function (and be dispatched
    as): firebase-tools reads `name@` as name@PROJECT_ID.iam.gserviceaccount.com, a full email
    as is, and resolves parameters at deploy time."""

    def declare(function: TaskFunction) -> TaskFunction:
        # The SDK keeps a function's manifest entry in its `__firebase_endpoint__` attribute.
        endpoint: manifest.ManifestEndpoint = vars(function)["__firebase_endpoint__"]
        assert endpoint.taskQueueTrigger is not None, "not a task queue function"
        # The SDK's TaskQueueTrigger type has no `invoker` key; firebase-tools' has.
        trigger = cast(manifest.TaskQueueTrigger,
                       {**endpoint.taskQueueTrigger, "invoker": list(principals)})
        vars(function)["__firebase_endpoint__"] = dataclasses.replace(
            endpoint, taskQueueTrigger=trigger)
        return function

    return declare
