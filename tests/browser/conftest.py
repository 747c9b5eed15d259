"""Fixtures for the browser test: Debian's Chromium driven by Playwright, against the stack.

Run through `make browser` (part of `make test`). Playwright never downloads a browser here: it
launches the system executable. Each test names its documents with a unique suffix.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from callables import PROJECT, Callables, sign_up
from google.cloud import firestore
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Page,
    Playwright,
    Request,
    sync_playwright,
)

if "COUNTERS_WEB_URL" not in os.environ:
    pytest.skip("needs the stack: run through `make test`", allow_module_level=True)

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"


def chromium_path() -> str:
    found = os.environ.get("CHROMIUM") or shutil.which("chromium")
    if not found:
        pytest.fail("no chromium on PATH: `make browser` installs Debian's package")
    return found


@pytest.fixture(scope="session")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="session")
def browser(playwright: Playwright) -> Iterator[Browser]:
    launched = playwright.chromium.launch(executable_path=chromium_path(), headless=True)
    yield launched
    launched.close()


# The phone the phone tests emulate (viewport, touch, user agent).
PHONE = "Pixel 7"


@pytest.fixture
def new_context(
    browser: Browser, playwright: Playwright
) -> Iterator[Callable[..., BrowserContext]]:
    """A fresh browser context (its own storage, so its own anonymous user): a desktop window,
    or a phone (Playwright's device descriptor) with `phone=True`."""
    contexts = []

    def make(*, phone: bool = False) -> BrowserContext:
        if phone:
            device = {key: value for key, value in playwright.devices[PHONE].items()
                      if key != "default_browser_type"}
            context = browser.new_context(**device)
        else:
            context = browser.new_context(viewport={"width": 1200, "height": 800})
        contexts.append(context)
        return context

    yield make
    for context in contexts:
        context.close()


# What each page open_in opened logged that a healthy page does not (`troubles`).
_TROUBLES: dict[Page, list[str]] = {}


def open_in(context: BrowserContext, path: str) -> Page:
    """Open the web client's `path` (a query, or a page such as ops.html) in `context`; browser
    console messages are printed, and its console warnings and errors and its failed requests
    noted for `troubles`."""
    page = context.new_page()
    noted = _TROUBLES.setdefault(page, [])

    def console(message: ConsoleMessage) -> None:
        print(f"[browser {message.type}] {message.text}")
        if message.type in ("warning", "error"):
            noted.append(f"console {message.type}: {message.text}")

    def failed(request: Request) -> None:
        # The Firestore SDK ends its own long-poll requests when it restarts a stream (a listener
        # added or removed): the page aborted them, nothing failed.
        if request.failure != "net::ERR_ABORTED":
            noted.append(f"request failed ({request.failure}): {request.method} {request.url}")

    page.on("console", console)
    page.on("requestfailed", failed)
    page.goto(os.environ["COUNTERS_WEB_URL"] + path)
    return page


def troubles(page: Page) -> list[str]:
    """The console warnings and errors, and the failed requests, of a page open_in opened."""
    return list(_TROUBLES[page])


@pytest.fixture
def open_page(new_context: Callable[..., BrowserContext]) -> Callable[[str], Page]:
    """Open the web client (with these query parameters) in a fresh desktop context."""
    return lambda query: open_in(new_context(), query)


def create_post(admin: Callables, post: str, shards: int = 2) -> None:
    """The counters of post `post`, as the page names them: claps (the post's id, the default
    policy), likes (`unique`) and views (one per user an hour: a test's reload always comes within
    the interval, however slow the machine)."""
    admin.call("create_counter", counter=post, shards=shards)
    admin.call("create_counter", counter=f"likes:{post}", shards=shards, policy={"unique": True})
    admin.call("create_counter", counter=f"views:{post}", shards=shards,
               policy={"min_interval_s": 3600})


def screenshot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


@pytest.fixture
def suffix() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture(scope="session")
def admin() -> Callables:
    return Callables(sign_up({"admin": True}).id_token)


@pytest.fixture(scope="session")
def db() -> firestore.Client:
    return firestore.Client(project=PROJECT)


@dataclass
class Staff:
    email: str
    password: str
    tenant: str
    id_token: str


@pytest.fixture
def staff(admin: Callables, suffix: str) -> Staff:
    """A configured tenant and an email/password account whose token has `tenants: [tenant]`."""
    tenant = f"web-{suffix}"
    admin.call("configure_sequence", tenant=tenant, timezone="Europe/Paris", reset_time="04:00")
    email, password = f"staff-{suffix}@example.test", "staff-password"
    user = sign_up({"tenants": [tenant]}, email=email, password=password)
    return Staff(email, password, tenant, user.id_token)
