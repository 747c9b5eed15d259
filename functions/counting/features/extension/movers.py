"""A process's moves: one document at a time, at most one a second each, shared by the
callers (trigger invocations) that wait on them."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from counting.features.extension.moving import MOVE_EVERY_S, Moved, Written

log = logging.getLogger(__name__)

WAITED_IN_BACKGROUND = "waited in the background for a move"


class Movers:
    """A process's moves, one document at a time and at most one per `every_s` each. A caller
    hands in the shard state its event told of and returns once a move took it: moves take every
    state handed in before they begin (one commit for a burst of events, which production
    delivers concurrently), and a state a move of this process read already needs none.

    `background`: the caller returns at once and a thread of the process waits in its place. The
    Functions emulator delivers a function's events one at a time, so a waiting caller would
    hold every later event behind it (production delivers them to concurrent requests, which
    wait together)."""

    def __init__(self, do: Callable[[str, list[Written], Callable[[Moved], None]], Moved], *,
                 every_s: float = MOVE_EVERY_S, background: bool = False,
                 monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._do = do
        self._every_s = every_s
        self._background = background
        self._monotonic = monotonic
        self._sleep = sleep
        self._lock = threading.Condition()
        self._documents: dict[str, _Document] = {}

    def after_write(self, path: str, written: Written | None = None) -> None:
        """Return once a move of the document at `path` has taken `written` (or read its shards
        after this call began) and then committed, or failed (logged: the amounts stay where
        they are, counted once they move). In the background: at once."""
        if self._background:
            threading.Thread(target=self._wait_in_background, args=(path, written),
                             daemon=True).start()
        else:
            self._wait_for_move(path, written)

    def _wait_in_background(self, path: str, written: Written | None) -> None:
        began = self._monotonic()
        self._wait_for_move(path, written)
        # The request's time in production (the extension benchmark bills it).
        log.info("%s: %s %.1f ms", path, WAITED_IN_BACKGROUND, (self._monotonic() - began) * 1000)

    def _wait_for_move(self, path: str, written: Written | None) -> None:
        with self._lock:
            document = self._documents.setdefault(path, _Document())
            at = written.update_time if written is not None else None
            if written is not None:
                document.pending.append(written)
            need = document.started_moves + 1
            while document.done < need:
                if at is not None and document.read_at is not None and at <= document.read_at:
                    if written in document.pending:
                        document.pending.remove(written)
                    return  # a move read it (and committed, or failed and was logged)
                if document.busy:
                    self._lock.wait()
                    continue
                document.busy = True
                wait = document.started + self._every_s - self._monotonic()
                self._lock.release()
                try:
                    if wait > 0:
                        self._sleep(wait)
                finally:
                    self._lock.acquire()
                document.started_moves += 1
                generation, document.started = document.started_moves, self._monotonic()
                taken, document.pending = document.pending, []
                self._lock.release()
                moved: Moved | None = None
                try:
                    moved = self._do(path, taken, lambda each: self._read(document, each))
                except Exception:
                    log.exception("%s: could not move its shards into it", path)
                finally:
                    self._lock.acquire()
                    document.done, document.busy = generation, False
                    if moved is not None:
                        self._read(document, moved)
                    self._lock.notify_all()
            if not document.busy and not document.pending and len(self._documents) > 1000:
                del self._documents[path]

    def _read(self, document: _Document, moved: Moved) -> None:
        """A move (of a loop still running, or the last) committed: callers whose states it
        read need wait no longer."""
        if moved.read_at is None:
            return
        with self._lock:
            document.read_at = max(document.read_at or moved.read_at, moved.read_at)
            self._lock.notify_all()


@dataclass
class _Document:
    """One document's moves in this process."""

    started_moves: int = 0  # moves that began
    done: int = 0  # the last of them that ended
    busy: bool = False
    started: float = float("-inf")
    pending: list[Written] = field(default_factory=list)  # handed in, not taken yet
    read_at: dt.datetime | None = None  # the latest read of a move that ended
