"""Every checker of the simulation can fail: each is shown failing on a seed run with the
protection it guards switched off, or, where no protection guards it, with its invariant broken
on purpose just before the run is judged (`world.Settings.tamper`). A checker that found nothing
here would be one that cannot see (issue 53: the promptness checker saw no change query's owner
for a round, and found nothing)."""

from __future__ import annotations

import dataclasses

import pytest
from counting.foundation import config

from tests.sim import checkers, protections, world
from tests.sim.actors import EXTENSION, ORDERS
from tests.sim.history import Answer, History
from tests.sim.model import Model, Path, Version
from tests.sim.run import describe

# (checker, the protection switched off): each fails on some seed of SEEDS without it (which
# seed moves with the schedule the code makes: the first was 0 to 4 for each at e220e02, 25
# for the audit once its runs counted the counters).
NEEDED = [("promptness", "overlap"), ("audit", "sweep"), ("trend totals", "sweep"),
          ("counters", "single_attempt"), ("fencing", "lease_fence"),
          ("answers", "unknown_after_applied"), ("final answers", "final_answers"),
          ("unique counters", "versioned_overwrites"), ("extension counters", "guarded_takes")]
SEEDS = range(48)


@pytest.mark.parametrize(("checker", "off"), NEEDED, ids=[n[0] for n in NEEDED])
def test_a_checker_fails_without_the_protection_it_guards(checker: str, off: str) -> None:
    seen = []
    for seed in SEEDS:
        outcome = world.run(seed, protected=protections.alone_off(off))
        if checker in outcome.failed:
            return
        seen.append(describe(outcome, findings=1))
    pytest.fail(f"{checker} found nothing on seeds {SEEDS} with {off} off:\n" + "\n".join(seen))


def rewrite(model: Model, path: Path, **fields: object) -> None:
    """A version of `path` with `fields` changed, as if committed now."""
    versions = model.docs[path]
    last = versions[-1]
    now = max(model.sim.now_us, last.commit_us + 1)
    versions.append(Version(commit_us=now, create_us=last.create_us,
                            data={**(last.data or {}), **fields}))


def policy_changed(model: Model, history: History) -> None:
    """The last configuration an admin was told was done is replaced by another."""
    path = next(request.configures[0] for request in reversed(history.requests)
                if request.configures is not None
                and any(call.answer is Answer.OK for call in request.calls))
    rewrite(model, path, policy={"by": [1, 999]}, timezone="Pacific/Kiritimati")


def collection_shard_bumped(model: Model, _: History) -> None:
    """A collection counter's shard holds one more than its documents count."""
    path = next(path for path, versions in model.docs.items()
                if len(path) == 4 and path[0] == config.COUNTERS and path[2] == config.SHARDS
                and path[1].startswith("orders") and versions[-1].data is not None)
    data = model.docs[path][-1].data or {}
    rewrite(model, path, count=int(data.get("count") or 0) + 1)


def issued_changed(model: Model, _: History) -> None:
    """A tenant's document says more numbers were issued today than were used (single_attempt
    off shows it in 1 seed of 30: too rare for here)."""
    path = next(path for path, versions in model.docs.items()
                if len(path) == 2 and path[0] == config.SEQUENCES
                and (versions[-1].data or {}).get("day"))
    rewrite(model, path, issued=10**6)


def record_renumbered(model: Model, _: History) -> None:
    """A request id's record holds a number it was not given."""
    path = next(path for path, versions in model.docs.items()
                if len(path) == 4 and path[2] == config.NUMBER_REQUESTS
                and (versions[-1].data or {}).get("state") == "issued")
    rewrite(model, path, number=10**6)


BROKEN = [("configurations", policy_changed), ("collection counters", collection_shard_bumped),
          ("sequences", issued_changed), ("sequence records", record_renumbered)]


@pytest.mark.parametrize(("checker", "tamper"), BROKEN, ids=[b[0] for b in BROKEN])
def test_a_checker_fails_on_its_invariant_broken(checker: str, tamper: world.Tamper) -> None:
    outcome = world.run(0, settings=dataclasses.replace(world.Settings(), tamper=tamper))
    assert checker in outcome.failed, describe(outcome)


def test_every_checker_is_shown_failing() -> None:
    """No checker is left out of the two tests above."""
    names = {c.name for c in checkers.every(ORDERS, EXTENSION)}
    assert names == {n[0] for n in NEEDED} | {b[0] for b in BROKEN}
