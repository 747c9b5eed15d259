"""The comments card: a post's comment count, kept by a collection counter, follows comments as
they come and go, from this window, another window and the server; the page names the counter
as the functions' escaping does."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from counting.features import declarations
from google.cloud import firestore
from playwright.sync_api import Page, expect

from .conftest import screenshot

# This repository's collection counters (functions/declarations.json).
OWN = declarations.Declared.of_codebase(declarations.CODEBASE)

COMMENTS = OWN.declarations[0]
# The first comments start a Functions emulator worker; the rollup publishes within seconds.
SLOW_MS = 60_000


def signed_in(page: Page) -> None:
    expect(page.locator("#who")).to_have_text(re.compile("Signed in anonymously"),
                                              timeout=SLOW_MS)
    expect(page.locator("#comment-add")).to_be_enabled(timeout=SLOW_MS)


def test_the_comment_count_follows_comments_live_in_two_windows(
    open_page: Callable[[str], Page], db: firestore.Client, suffix: str
) -> None:
    """Three comments from one window, one from the server, one deleted: both windows show
    each count as it is published, and no error."""
    post = f"web-{suffix}"  # also a valid counter id: the post card counts its likes
    page, other = open_page(f"?post={post}"), open_page(f"?post={post}")
    count, seen = page.locator("#comment-count"), other.locator("#comment-count")
    signed_in(page)
    expect(count).to_have_text("0", timeout=SLOW_MS)

    for n in range(3):
        page.locator("#comment-text").fill(f"comment {n}")
        page.locator("#comment-add").click()
    expect(count).to_have_text("3", timeout=SLOW_MS)
    expect(seen).to_have_text("3", timeout=SLOW_MS)
    expect(page.locator("#comment-detail")).to_have_text("3 of them yours", timeout=SLOW_MS)

    db.collection("posts", post, "comments").document("from-server").set(
        {"author": "server", "text": "hello"})
    expect(seen).to_have_text("4", timeout=SLOW_MS)
    signed_in(other)
    expect(other.locator("#comment-delete")).to_be_disabled()  # none of them is theirs

    page.locator("#comment-delete").click()
    expect(count).to_have_text("3", timeout=SLOW_MS)
    expect(seen).to_have_text("3", timeout=SLOW_MS)
    expect(page.locator("#comment-detail")).to_have_text("2 of them yours", timeout=SLOW_MS)
    expect(page.locator("#errors li")).to_have_count(0)
    expect(other.locator("#errors li")).to_have_count(0)
    screenshot(page, "comments.png")


@pytest.mark.parametrize("post", ["été: a.b", "x" * 150 + "é"], ids=["unicode", "long"])
def test_the_page_names_the_counter_as_the_functions_do(
    open_page: Callable[[str], Page], post: str
) -> None:
    """Odd and long post ids give the same counter id in the browser as in the triggers."""
    page = open_page(f"?post={post.replace(' ', '%20').replace(':', '%3A')}")
    expect(page.locator("#comment-count")).to_have_attribute(
        "data-counter", COMMENTS.counter_id(post), timeout=SLOW_MS)
