"""The web client in a real browser: claps count exactly once, live in two windows; a like is a
toggle counted once per user; a view counts once per interval; a staff member takes numbers; the
trends panel follows its document; errors are shown in words, once, until they no longer apply."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable

from callables import Callables, sign_up
from google.cloud import firestore
from playwright.sync_api import Page, Response, Route, expect

from ..waiting import always, eventually
from .conftest import Staff, create_post, screenshot, troubles

CLICKS = 20
# The rollup refreshes about once a second: watch the display for a few of its periods.
SETTLED_S = 4.0
# The first calls start Functions emulator workers (up to ~6 s each on a cold stack).
SLOW_MS = 60_000

RECORD_SHOWN = """() => {
  const el = document.getElementById("clap-count");
  window.shown = [];
  new MutationObserver(() => window.shown.push(el.textContent))
    .observe(el, {childList: true, characterData: true, subtree: true});
}"""


def shown_count(page: Page, output: str = "#clap-count") -> int:
    expect(page.locator(output)).to_have_text(re.compile(r"^\d+$"), timeout=SLOW_MS)
    return int(page.locator(output).inner_text())


def test_twenty_quick_claps_count_exactly_twenty_in_two_windows(
    open_page: Callable[[str], Page], admin: Callables, db: firestore.Client, suffix: str
) -> None:
    """Twenty quick clicks show +20, never more, before and after the rollup catches up."""
    counter = f"web-{suffix}"
    create_post(admin, counter, shards=4)
    page = open_page(f"?post={counter}")
    clap, count = page.locator("#clap"), page.locator("#clap-count")
    expect(page.locator("#who")).to_have_text(re.compile("Signed in anonymously"),
                                              timeout=SLOW_MS)
    expect(clap).to_be_enabled(timeout=SLOW_MS)
    initial = shown_count(page)
    target = initial + CLICKS
    page.evaluate(RECORD_SHOWN)

    for _ in range(CLICKS):
        clap.click()

    expect(count).to_have_text(str(target), timeout=SLOW_MS)
    eventually(lambda: db.document(f"counters/{counter}").get().get("count") == target)
    # The page's listener has the caught-up rollup and no acknowledged clap left outside it.
    expect(count).to_have_attribute("data-rollup", str(target), timeout=SLOW_MS)
    expect(count).to_have_attribute("data-unconfirmed", "0")
    expect(count).to_have_attribute("data-pending", "0")
    always(lambda: count.inner_text() == str(target), for_s=SETTLED_S)
    shown = [int(text) for text in page.evaluate("window.shown")]
    assert shown, "the display never changed"
    assert max(shown) == target, f"the display went above +{CLICKS}: {shown}"
    assert shown == sorted(shown), f"the display went backwards: {shown}"
    expect(page.locator("#errors li")).to_have_count(0)
    assert troubles(page) == []
    screenshot(page, "claps.png")

    other = open_page(f"?post={counter}")
    expect(other.locator("#clap-count")).to_have_text(str(target), timeout=SLOW_MS)
    expect(other.locator("#clap")).to_be_enabled()
    other.locator("#clap").click()
    # Each window sees the other's clap through its listener.
    expect(count).to_have_text(str(target + 1), timeout=SLOW_MS)
    expect(other.locator("#clap-count")).to_have_text(str(target + 1), timeout=SLOW_MS)
    screenshot(other, "claps-second-window.png")


def test_a_like_is_a_toggle_counted_once_per_user_and_a_view_once_an_interval(
    open_page: Callable[[str], Page], admin: Callables, db: firestore.Client, suffix: str
) -> None:
    """Like, unlike, like again: the unique counter ends at 1 and the page says "Liked" after a
    reload; the reload's view is refused as too soon, in words, not as an error."""
    post = f"web-{suffix}"
    create_post(admin, post)
    page = open_page(f"?post={post}")
    like, likes = page.locator("#like"), page.locator("#like-count")
    expect(like).to_be_enabled(timeout=SLOW_MS)
    expect(like).to_have_attribute("aria-pressed", "false")
    expect(page.locator("#views-detail")).to_have_text("yours counted", timeout=SLOW_MS)
    for pressed, total in (("true", 1), ("false", 0), ("true", 1)):
        like.click()
        expect(like).to_have_attribute("aria-pressed", pressed)
        expect(likes).to_have_text(str(total), timeout=SLOW_MS)
    expect(likes).to_have_attribute("data-pending", "0", timeout=SLOW_MS)
    eventually(lambda: db.document(f"counters/likes:{post}").get().get("count") == 1)
    expect(page.locator("#views-count")).to_have_text("1", timeout=SLOW_MS)

    page.reload()
    expect(like).to_have_attribute("aria-pressed", "true", timeout=SLOW_MS)
    expect(like).to_have_text("\u2665 Liked")
    expect(page.locator("#views-detail")).to_have_text(
        "yours was counted recently (one view per user every 3600 s)", timeout=SLOW_MS)
    always(lambda: page.locator("#views-count").inner_text() == "1", for_s=2.0)
    expect(likes).to_have_text("1")
    expect(page.locator("#errors li")).to_have_count(0)


def test_a_like_whose_answer_is_lost_is_retried_with_its_id_and_counted_once(
    open_page: Callable[[str], Page], admin: Callables, db: firestore.Client, suffix: str
) -> None:
    """The increment lands but its answer is lost: the retry reuses the id and adds nothing."""
    counter = f"web-{suffix}"
    create_post(admin, counter)
    page = open_page(f"?post={counter}")
    count = page.locator("#clap-count")
    expect(page.locator("#clap")).to_be_enabled(timeout=SLOW_MS)
    initial = shown_count(page)
    request_ids: list[str] = []
    answers: list[dict[str, object]] = []

    def lose_first_answer(route: Route) -> None:
        data = json.loads(route.request.post_data or "{}").get("data", {})
        if route.request.method != "POST" or data.get("counter") != counter:
            route.continue_()
            return
        request_ids.append(data["request_id"])
        if len(request_ids) == 1:
            route.fetch()  # the increment reaches the functions and is applied...
            route.abort("connectionreset")  # ...but the browser never sees the answer
        else:
            answer = route.fetch()
            answers.append(answer.json()["result"])
            route.fulfill(response=answer)

    page.route("**/us-central1/increment", lose_first_answer)
    page.locator("#clap").click()

    expect(count).to_have_attribute("data-rollup", str(initial + 1), timeout=SLOW_MS)
    expect(count).to_have_attribute("data-pending", "0", timeout=SLOW_MS)
    assert len(request_ids) == 2, request_ids
    assert request_ids[0] == request_ids[1], "the retry used a new request_id"
    # The retry was not applied again, and says when the first call was.
    assert [(a["counter"], a["applied"]) for a in answers] == [(counter, False)], answers
    assert "committed_at" in answers[0], "the first call did not land"
    assert db.document(f"counters/{counter}").get().get("count") == initial + 1
    always(lambda: count.inner_text() == str(initial + 1), for_s=SETTLED_S)
    expect(page.locator("#errors li")).to_have_count(0)


def test_staff_takes_a_number_and_sees_the_last_number_issued(
    open_page: Callable[[str], Page], staff: Staff
) -> None:
    """A staff member signs in, takes a number, and "last number issued" follows every till."""
    page = open_page(f"?tenant={staff.tenant}")
    page.locator("#staff-email").fill(staff.email)
    page.locator("#staff-password").fill(staff.password)
    page.locator("#staff-sign-in").click()
    expect(page.locator("#staff-who")).to_have_text(f"Staff {staff.email} at {staff.tenant}",
                                                    timeout=SLOW_MS)
    issued = page.locator("#last-issued")
    expect(page.locator("#tenant")).to_contain_text("Last number issued")
    expect(issued).to_have_text("0", timeout=SLOW_MS)

    page.locator("#take-number").click()
    expect(page.locator("#my-number")).to_have_text("1", timeout=SLOW_MS)
    expect(issued).to_have_text("1", timeout=SLOW_MS)

    # A number taken elsewhere (another till) shows up through the listener.
    Callables(staff.id_token).call("next_number", tenant=staff.tenant)
    expect(issued).to_have_text("2", timeout=SLOW_MS)
    expect(page.locator("#my-number")).to_have_text("1")
    expect(page.locator("#errors li")).to_have_count(0)
    screenshot(page, "tenant.png")


def test_trends_panel_follows_the_region_document(
    open_page: Callable[[str], Page], db: firestore.Client, suffix: str
) -> None:
    """The panel lists a region's top tags per window, and says so when there are none."""
    region = f"web-{suffix}"
    page = open_page("")
    expect(page.locator("#who")).to_have_text(re.compile("Signed in anonymously"),
                                              timeout=SLOW_MS)
    status, items = page.locator("#trends-status"), page.locator("#trend-items li")
    page.locator("#region").fill(region)
    page.locator("#region").press("Enter")
    expect(status).to_have_text(f'No trends yet for "{region}".', timeout=SLOW_MS)

    day = {"items": [{"tag": "pancakes", "count": 12_000}, {"tag": "coffee", "count": 40}],
           "trending": ["pancakes"]}
    hour = {"items": [{"tag": "coffee", "count": 7}], "trending": []}
    db.document(f"trends/{region}").set({
        "window": "24h", **day, "updated_at": firestore.SERVER_TIMESTAMP,
        "windows": {"24h": day, "1h": hour},
    })
    expect(items).to_have_count(2, timeout=SLOW_MS)
    expect(items.first).to_contain_text("#pancakes 12000 trending")
    page.locator("#window").select_option("1h")
    expect(items).to_have_count(1)
    expect(items.first).to_have_text("#coffee 7")
    screenshot(page, "trends.png")

    db.document(f"trends/{region}").delete()
    expect(status).to_have_text(f'No trends yet for "{region}".', timeout=SLOW_MS)
    page.locator("#region").fill("Not a region!")
    page.locator("#region").press("Enter")
    expect(status).to_contain_text("is not a region")


def test_failures_are_shown_in_words(
    open_page: Callable[[str], Page], staff: Staff, suffix: str
) -> None:
    """A missing post and a wrong password are explained; the banner goes once sign-in works."""
    page = open_page(f"?post=missing-{suffix}&tenant={staff.tenant}")
    errors = page.locator("#errors li")
    expect(page.locator("#clap-count")).to_have_text("no such post", timeout=SLOW_MS)
    expect(page.locator("#clap")).to_be_disabled()
    expect(page.locator("#like")).to_be_disabled()
    page.locator("#staff-email").fill(staff.email)
    for _ in range(2):
        page.locator("#staff-password").fill("not-the-password")
        page.locator("#staff-sign-in").click()
        expect(page.locator("#staff-sign-in")).to_be_enabled(timeout=SLOW_MS)
    expect(errors).to_have_count(1)
    expect(errors).to_contain_text("Staff sign-in failed (wrong email or password)")
    screenshot(page, "errors.png")

    page.locator("#staff-password").fill(staff.password)
    page.locator("#staff-sign-in").click()
    expect(page.locator("#staff-who")).to_have_text(f"Staff {staff.email} at {staff.tenant}",
                                                    timeout=SLOW_MS)
    expect(errors).to_have_count(0)


def test_an_account_that_is_not_staff_gets_one_banner_until_it_signs_out(
    open_page: Callable[[str], Page], staff: Staff, suffix: str
) -> None:
    """Signing in without the tenant's claim is explained once, in words, until sign-out."""
    email, password = f"visitor-{suffix}@example.test", "visitor-password"
    sign_up(email=email, password=password)
    page = open_page(f"?tenant={staff.tenant}")
    errors = page.locator("#errors li")
    page.locator("#staff-email").fill(email)
    page.locator("#staff-password").fill(password)
    page.locator("#staff-sign-in").click()
    expect(page.locator("#staff-who")).to_contain_text("not staff", timeout=SLOW_MS)
    expect(errors).to_have_count(1)
    expect(errors).to_contain_text(f'{email} is not staff of "{staff.tenant}"')
    expect(errors).not_to_contain_text("@ L")  # no rules evaluation trace
    expect(page.locator("#take-number")).to_be_disabled()
    always(lambda: errors.count() == 1, for_s=2.0)
    screenshot(page, "not-staff.png")

    page.locator("#staff-sign-out").click()
    expect(page.locator("#staff-form")).to_be_visible(timeout=SLOW_MS)
    expect(errors).to_have_count(0)


def test_the_page_and_its_icon_load_without_missing_files(
    open_page: Callable[[str], Page]
) -> None:
    """Nothing the page asks its server for is missing, its icon included."""
    missing: list[str] = []

    def note(response: Response) -> None:
        if response.status >= 400 and response.url.startswith(os.environ["COUNTERS_WEB_URL"]):
            missing.append(f"{response.status} {response.url}")

    page = open_page("")
    page.on("response", note)
    page.reload()
    expect(page.locator("#who")).to_have_text(re.compile("Signed in anonymously"),
                                              timeout=SLOW_MS)
    icon = page.locator("link[rel=icon]").get_attribute("href")
    assert icon is not None
    assert page.request.get(os.environ["COUNTERS_WEB_URL"] + icon.lstrip("/")).ok
    assert missing == []
