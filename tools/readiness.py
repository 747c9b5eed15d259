"""Waiting for a server to be ready: the one wait every suite, tool and benchmark uses.

A server that is starting can refuse a connection, reset it, or accept it and answer nothing for a
while (the Functions emulator holds the first request to a codebase while it loads another one,
more than 10 s on a cold machine). Each of these is "not ready yet" until the deadline; at the
deadline the wait says what it last saw. Only a process that has exited ends the wait early.
"""

from __future__ import annotations

import http.client
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Container

# What a transport can raise while a server starts: refused, reset, timed out (all OSError, as is
# urllib's URLError), or a connection closed mid-answer (http.client's own errors).
TRANSPORT_FAILURES: tuple[type[BaseException], ...] = (OSError, http.client.HTTPException)


class NotReady(Exception):
    """A server that did not become ready in time, or whose process exited first."""


def http_probe(url: str, ready: Container[int], *, body: bytes | None = None,
               timeout_s: float = 10.0) -> Callable[[], str | None]:
    """A probe for `wait_ready`: POST `body` (GET without one) to `url`; ready when the status is
    one of `ready`, otherwise what it answered."""

    def probe() -> str | None:
        request = urllib.request.Request(
            url, data=body, headers={"Content-Type": "application/json"} if body else {})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as answer:
                status = int(answer.status)
        except urllib.error.HTTPError as error:
            status = error.code
        return None if status in ready else f"HTTP {status}"

    return probe


def wait_ready(what: str, probe: Callable[[], str | None], timeout_s: float, *,
               every_s: float = 0.5, exited: Callable[[], str | None] = lambda: None) -> None:
    """Call `probe` until it returns None (ready). A string it returns, or a transport failure it
    raises, is "not yet". `exited` returns why the server's process is gone (then the wait stops at
    once), or None while it runs. NotReady at the deadline, naming the last thing seen."""
    deadline = time.monotonic() + timeout_s
    last = "nothing yet"
    while True:
        gone = exited()
        if gone is not None:
            raise NotReady(f"{what}: {gone} (last seen: {last})")
        try:
            last = probe() or ""
            if not last:
                return
        except TRANSPORT_FAILURES as error:
            last = f"{type(error).__name__}: {error}"
        if time.monotonic() >= deadline:
            raise NotReady(f"{what} not ready after {timeout_s:.0f} s (last seen: {last})")
        time.sleep(min(every_s, max(0.0, deadline - time.monotonic())))
