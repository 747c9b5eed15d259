"""tools/readiness.py against real sockets: every transport failure is "not yet" until the
deadline, which names what it last saw."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from readiness import NotReady, http_probe, wait_ready


@contextmanager
def silent_server() -> Iterator[str]:
    """A server that accepts connections and never answers (a worker still loading)."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/"
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        listener.close()


@contextmanager
def answering_server(statuses: list[int]) -> Iterator[str]:
    """A server that answers each request with the next status of `statuses` (the last one
    after that)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(statuses.pop(0) if len(statuses) > 1 else statuses[0])
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return int(probe.getsockname()[1])


def test_a_server_that_never_answers_is_not_ready_until_the_deadline() -> None:
    """A read timeout is "not yet", never an error that escapes; the deadline names it."""
    with silent_server() as url:
        began = time.monotonic()
        with pytest.raises(NotReady, match=r"not ready after 2 s \(last seen: .*timed out"):
            wait_ready("silent", http_probe(url, (200,), body=b"{}", timeout_s=0.5), 2.0,
                       every_s=0.1)
        assert time.monotonic() - began >= 2.0


def test_a_late_answer_after_timeouts_is_ready() -> None:
    """Timeouts, then refusals, then the answer: ready at the answer."""
    port = closed_port()
    attempts: list[str] = []

    def probe() -> str | None:
        attempts.append("try")
        if len(attempts) <= 2:
            raise TimeoutError("timed out")
        if len(attempts) <= 4:
            socket.create_connection(("127.0.0.1", port), timeout=1)
        return None

    wait_ready("flaky", probe, 10.0, every_s=0.01)
    assert len(attempts) == 5


def test_a_refused_connection_is_not_yet_and_named_at_the_deadline() -> None:
    url = f"http://127.0.0.1:{closed_port()}/"
    with pytest.raises(NotReady, match="Connection refused"):
        wait_ready("closed", http_probe(url, (200,)), 0.3, every_s=0.05)


def test_an_answer_outside_the_ready_statuses_is_not_yet() -> None:
    """404 (functions not loaded) is waited out; 401 (the function refused an empty call)
    is ready."""
    with answering_server([404, 404, 401]) as url:
        wait_ready("loading", http_probe(url, (200, 401), body=b"{}"), 10.0, every_s=0.01)
    with answering_server([404]) as url, pytest.raises(NotReady, match="HTTP 404"):
        wait_ready("never", http_probe(url, (200,), body=b"{}"), 0.3, every_s=0.05)


def test_an_exited_server_ends_the_wait_at_once() -> None:
    with silent_server() as url:
        began = time.monotonic()
        with pytest.raises(NotReady, match="firebase exited with 1"):
            wait_ready("gone", http_probe(url, (200,), timeout_s=0.2), 60.0,
                       exited=lambda: "firebase exited with 1")
        assert time.monotonic() - began < 5


def test_an_error_that_is_not_the_transports_escapes() -> None:
    """A bug in a probe is not waited out for minutes."""
    def probe() -> str | None:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        wait_ready("buggy", probe, 60.0)
