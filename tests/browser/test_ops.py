"""The operations dashboard (ops.html): an admin watches a load raise a counter's write rate and
autoscaling grow its shards, with the rollup's health; anyone else is refused its data."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from callables import Callables, CallError, sign_up
from playwright.sync_api import BrowserContext, Locator, Page, expect

from ..waiting import eventually
from .conftest import open_in, screenshot, troubles
from .test_web import SLOW_MS

# The CLI's load: ~20 writes/s on a 1-shard counter is far above what one shard is sized for, so
# the rollup measures the rate and grows the counter (counting.writepath.autoscale) within seconds.
LOAD = ("--rate", "20", "--seconds", "45", "--concurrency", "4", "--no-check")
# The rate the plot must reach: a clear rise, well below what the load drives.
RISEN = 5.0
DOCS = Path(__file__).resolve().parents[2] / "docs"
# A time axis's labels (times of day: 21:35:30 21:36:00, or 21:35 21:36 on whole minutes) and a
# legend's time (21:35:07).
TIMES = re.compile(r"^\d\d:\d\d(:\d\d)?( \d\d:\d\d(:\d\d)?)+$")
CLOCK = re.compile(r"^\d\d:\d\d:\d\d$")


def plotted_shards(plot: Locator) -> list[int]:
    """The shard counts the plot shows, oldest first."""
    return [int(n) for n in (plot.get_attribute("data-shards") or "").split()]


def sign_in(page: Page, email: str, password: str) -> None:
    page.locator("#admin-email").fill(email)
    page.locator("#admin-password").fill(password)
    page.locator("#admin-sign-in").click()
    expect(page.locator("#who")).to_have_text(f"Signed in as {email}", timeout=SLOW_MS)


def test_an_admin_sees_the_rate_rise_and_the_shards_grow_under_load(
    new_context: Callable[..., BrowserContext], admin: Callables, suffix: str
) -> None:
    """An idle counter's plot reads 0..1 writes/s against the time of day, its legend the latest
    values; while `counters load` runs, its rate plot rises and its shard count steps up; the
    rollup's health shows its last tick."""
    counter = f"ops-{suffix}"
    admin.call("create_counter", counter=counter, shards=1)
    email, password = f"admin-{suffix}@example.test", "admin-password"
    sign_up({"admin": True}, email=email, password=password)
    page = open_in(new_context(), "ops.html")
    sign_in(page, email, password)
    card = page.locator(f'article.counter[data-counter="{counter}"]')
    plot = card.locator(".plot")
    expect(card.locator(".shards")).to_have_text("1", timeout=SLOW_MS)
    expect(card.locator(".policy")).to_have_text("default (+1 by users)")
    expect(plot).to_have_attribute("data-shards", "1", timeout=SLOW_MS)
    expect(plot.locator("canvas")).to_have_count(1)
    expect(card.locator(".kind")).to_have_text("sharded (increment)")
    expect(plot).to_have_attribute("data-time-axis", TIMES)
    expect(plot).to_have_attribute("data-left-axis", re.compile(r"^0( \S+)* 1$"))
    expect(plot.locator(".u-legend .u-value")).to_have_text([CLOCK, "0", "1"])

    counters = str(Path(sys.executable).with_name("counters"))
    load = subprocess.Popen([counters, "load", counter, *LOAD], stdout=subprocess.DEVNULL)
    try:
        eventually(lambda: float(plot.get_attribute("data-max-rate") or 0) >= RISEN,
                   timeout_s=60)
        eventually(lambda: plotted_shards(plot)[-1] > 1, timeout_s=60)
        shards = plotted_shards(plot)
        assert shards[0] == 1, shards
        expect(card.locator(".shards")).not_to_have_text("1")
        assert shards == sorted(shards), f"the shard count went down under load: {shards}"
        expect(page.locator('[data-fact="last tick"]')).not_to_have_text("never")
        expect(page.locator("#health-plot")).to_have_attribute("data-time-axis", TIMES)
        expect(page.locator("#errors li")).to_have_count(0)
        assert troubles(page) == []
        page.locator("#counter-filter").fill(counter)
        expect(page.locator("article.counter")).to_have_count(1)
        screenshot(page, "ops.png")
        if os.environ.get("COUNTERS_DOCS_SCREENSHOTS"):
            page.set_viewport_size({"width": 1200, "height": 900})
            page.screenshot(path=str(DOCS / "ops.png"))
    finally:
        load.terminate()
        load.wait()


def test_a_user_who_is_not_admin_is_refused_the_dashboard_data(
    new_context: Callable[..., BrowserContext], admin: Callables, suffix: str
) -> None:
    """A signed-in user without the admin claim sees the rules' refusals, in words, and no data;
    the callables refuse the user a strong read too."""
    admin.call("create_counter", counter=f"ops-{suffix}", shards=1)
    email, password = f"user-{suffix}@example.test", "user-password"
    user = sign_up(email=email, password=password)
    page = open_in(new_context(), "ops.html")
    sign_in(page, email, password)
    errors = page.locator("#errors li")
    expect(errors).to_have_count(3, timeout=SLOW_MS)
    expect(errors.nth(0)).to_contain_text("failed (not allowed)")
    for refused in ("Listing counters failed (not allowed)",
                    "Reading the rollup's health failed (not allowed)",
                    "Listing trends failed (not allowed)"):
        expect(page.locator("#errors")).to_contain_text(refused)
    expect(page.locator("article.counter")).to_have_count(0)
    try:
        Callables(user.id_token).call("get_count", counter=f"ops-{suffix}", consistency="strong")
    except CallError as error:
        assert error.status == "PERMISSION_DENIED"
    else:
        raise AssertionError("a user read a counter strongly")
    screenshot(page, "ops-refused.png")
