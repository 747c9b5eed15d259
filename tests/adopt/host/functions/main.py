"""The host app's own function, in its default codebase."""

from firebase_functions import https_fn


@https_fn.on_request()
def hello(req: https_fn.Request) -> https_fn.Response:
    return https_fn.Response("hello from the host app")
