"""The page visits card: the extension counter visits:{page} counted in Chromium through the
Firebase JS SDK as the Distributed Counter extension's clients count (`extensionCounter` of
@counters/client: a shard per device, kept in the extension SDK's cookie, a merge of
increment(n) into it), its view (the page's field + the device's shard and partials) and its
total (`counters/visits:{page}`, the counters client's listener) following each write; the rules
refuse a change other than -1..1, and another device's visits reach this one's view once the
backend moved them into the page."""

from __future__ import annotations

import re
from collections.abc import Callable

from callables import Callables
from counting.features import declarations
from google.cloud import firestore
from playwright.sync_api import Locator, Page, expect

from ..waiting import always, eventually
from .conftest import create_post, screenshot, troubles
from .test_web import SETTLED_S, SLOW_MS

# This repository's extension counter (functions/declarations.json).
VISITS = next(d for d in declarations.Declared.of_codebase(declarations.CODEBASE).declarations
              if d.extension is not None)
# The extension's web SDK keeps a device's shard id in this cookie.
SHARD_COOKIE = "FIRESTORE_COUNTER_SHARD_ID"
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
# Writes in the order a visitor makes them: four visits, one taken back, one more.
WRITES = (1, 1, 1, -1, 1)


def ready(page: Page) -> None:
    expect(page.locator("#who")).to_have_text(re.compile("Signed in anonymously"),
                                              timeout=SLOW_MS)
    expect(page.locator("#visit-add")).to_be_enabled(timeout=SLOW_MS)


def add(page: Page, by: int) -> Locator:
    """Add `by` through the card; the listed write (newest first)."""
    page.locator("#visit-by").fill(str(by))
    page.locator("#visit-add").click()
    return page.locator("#visit-writes li").first


def shown(page: Page, total: int) -> None:
    """The card's view and the counter's total both show `total`."""
    expect(page.locator("#visits-view")).to_have_text(str(total), timeout=SLOW_MS)
    expect(page.locator("#visits-total")).to_have_text(str(total), timeout=SLOW_MS)


def test_extension_protocol_writes_show_in_the_view_and_the_total_and_a_2_is_refused(
    open_page: Callable[[str], Page], admin: Callables, db: firestore.Client, suffix: str
) -> None:
    post = f"visits-{suffix}"
    create_post(admin, post)  # the card's post: its other counters answer the page's calls
    db.collection("pages").document(post).set({"title": post})  # shards need their page
    counter = VISITS.counter_id(post)
    rollup = db.document(f"counters/{counter}")
    page = open_page(f"?post={post}")
    ready(page)
    shown(page, 0)
    expect(page.locator("#visits-total")).to_have_attribute("data-counter", counter)
    shard = page.locator("#visits-shard").inner_text()
    assert UUID.match(shard), shard
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    assert cookies.get(SHARD_COOKIE) == shard

    for by in WRITES:
        add(page, by)
    writes = page.locator("#visit-writes li")
    expect(writes).to_have_count(len(WRITES))
    for n in range(len(WRITES)):
        expect(writes.nth(n)).to_have_attribute("data-outcome", "written", timeout=SLOW_MS)
    total = sum(WRITES)
    shown(page, total)
    eventually(lambda: rollup.get().get("count") == total, timeout_s=SLOW_MS / 1000)
    assert troubles(page) == []
    screenshot(page, "visits.png")

    # +2 is beyond the declared bound: Firestore refuses the write, and the view, which showed it
    # at once (latency compensation), takes it back.
    refused = add(page, 2)
    expect(refused).to_have_attribute("data-outcome", "permission-denied", timeout=SLOW_MS)
    expect(refused).to_have_text("+2: refused (permission-denied)")
    expect(page.locator("#errors li span")).to_have_text(["Adding +2 visits failed (not allowed)"])
    shown(page, total)
    always(lambda: page.locator("#visits-view").inner_text() == str(total)
           and page.locator("#visits-total").inner_text() == str(total)
           and rollup.get().get("count") == total, for_s=SETTLED_S)

    # Another device has a shard of its own; its view has this device's visits once the backend
    # moved them into the page, and this device's view has its visit once moved too.
    other = open_page(f"?post={post}")
    ready(other)
    assert other.locator("#visits-shard").inner_text() not in ("", shard)
    shown(other, total)
    expect(add(other, 1)).to_have_attribute("data-outcome", "written", timeout=SLOW_MS)
    shown(other, total + 1)
    shown(page, total + 1)
    eventually(lambda: rollup.get().get("count") == total + 1, timeout_s=SLOW_MS / 1000)
    expect(other.locator("#errors li")).to_have_count(0)
    assert troubles(other) == []
