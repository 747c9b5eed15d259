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
from playwright.sync_api import Browser, Page, Playwright, sync_playwright

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


@pytest.fixture
def open_page(browser: Browser) -> Iterator[Callable[[str], Page]]:
    """Open the web client (with these query parameters) in a fresh browser context: a window
    with its own storage, so its own anonymous user. Browser console errors are printed."""
    contexts = []

    def opener(query: str) -> Page:
        context = browser.new_context(viewport={"width": 1200, "height": 800})
        contexts.append(context)
        page = context.new_page()
        page.on("console", lambda message: print(f"[browser {message.type}] {message.text}"))
        page.goto(os.environ["COUNTERS_WEB_URL"] + query)
        return page

    yield opener
    for context in contexts:
        context.close()


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
