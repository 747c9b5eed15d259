"""The app on a phone (Playwright's device emulation: viewport, touch): installable, it loads
offline from its service worker, and taps made offline are kept across a reload and counted
exactly once when the network is back, live in another window."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

from callables import Callables
from google.cloud import firestore
from playwright.sync_api import BrowserContext, Page, expect

from ..waiting import always, eventually
from .conftest import create_post, open_in, screenshot
from .test_web import SETTLED_S, SLOW_MS, shown_count

TAPS = 5
DOCS = Path(__file__).resolve().parents[2] / "docs"


def served_offline(page: Page) -> None:
    """Wait until the service worker controls the page: it activates only once its install
    cached the whole app shell."""
    page.wait_for_function("navigator.serviceWorker.controller !== null", timeout=SLOW_MS)


def test_taps_made_offline_survive_a_reload_and_count_exactly_once(
    new_context: Callable[..., BrowserContext], admin: Callables, db: firestore.Client,
    suffix: str,
) -> None:
    """Offline: five taps show as pending, a reload (served by the service worker) keeps them;
    online again: the server count rises by exactly five, and another window sees it live."""
    post = f"phone-{suffix}"
    create_post(admin, post)
    phone = new_context(phone=True)
    page = open_in(phone, f"?post={post}")
    clap, count = page.locator("#clap"), page.locator("#clap-count")
    expect(page.locator("#who")).to_have_text(re.compile("Signed in anonymously"),
                                              timeout=SLOW_MS)
    expect(clap).to_be_enabled(timeout=SLOW_MS)
    initial = shown_count(page)
    served_offline(page)

    phone.set_offline(True)
    for _ in range(TAPS):
        clap.tap()
    expect(count).to_have_text(str(initial + TAPS))
    expect(count).to_have_attribute("data-pending", str(TAPS))
    expect(page.locator("#network")).to_have_text(f"Offline: {TAPS} taps waiting on this device.")

    response = page.reload()
    assert response is not None and response.from_service_worker
    # The last count Firestore saw (kept on the device) plus the taps still queued.
    expect(count).to_have_text(str(initial + TAPS), timeout=SLOW_MS)
    expect(count).to_have_attribute("data-pending", str(TAPS))
    expect(page.locator("#network")).to_have_text(f"Offline: {TAPS} taps waiting on this device.")
    assert db.document(f"counters/{post}").get().get("count") == initial
    screenshot(page, "phone-offline.png")

    other = open_in(new_context(), f"?post={post}")
    expect(other.locator("#clap-count")).to_have_text(str(initial), timeout=SLOW_MS)

    phone.set_offline(False)
    eventually(lambda: admin.call("get_count", counter=post, consistency="strong")["count"]
               == initial + TAPS)
    expect(other.locator("#clap-count")).to_have_text(str(initial + TAPS), timeout=SLOW_MS)
    expect(count).to_have_attribute("data-rollup", str(initial + TAPS), timeout=SLOW_MS)
    expect(count).to_have_attribute("data-pending", "0")
    expect(page.locator("#network")).to_be_hidden()
    always(lambda: admin.call("get_count", counter=post, consistency="strong")["count"]
           == initial + TAPS and count.inner_text() == str(initial + TAPS), for_s=SETTLED_S)
    expect(page.locator("#errors li")).to_have_count(0)
    screenshot(page, "phone.png")
    if os.environ.get("COUNTERS_DOCS_SCREENSHOTS"):
        page.screenshot(path=str(DOCS / "phone.png"))


def test_the_app_is_installable(new_context: Callable[..., BrowserContext]) -> None:
    """The manifest names a start URL, a standalone display and PNG icons that load."""
    page = open_in(new_context(phone=True), "")
    href = page.locator("link[rel=manifest]").get_attribute("href")
    assert href is not None
    reply = page.request.get(os.environ["COUNTERS_WEB_URL"] + href.lstrip("/"))
    assert reply.ok
    manifest = json.loads(reply.text())
    assert manifest["start_url"] == "/" and manifest["display"] == "standalone"
    sizes = {icon["sizes"] for icon in manifest["icons"] if icon["type"] == "image/png"}
    assert {"192x192", "512x512"} <= sizes
    for icon in manifest["icons"]:
        assert page.request.get(os.environ["COUNTERS_WEB_URL"] + icon["src"].lstrip("/")).ok
    served_offline(page)
