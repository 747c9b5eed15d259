"""The simulation of production Firestore (tests/sim/world.py) over a bounded set of seeds:
`make sim SEEDS=N` runs more, and each seed with each protection alone off."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.sim import protections, world
from tests.sim.run import describe

# Seeds that once found a loss or a double, kept as regressions: 91 and 803, a fold moving the
# shard counts of a counter whose changes a holder had deferred (the fold now waits for them,
# and stamps its survivors); 396 and 898, a scheduled holder deferring the same counters every
# minute while Cloud Tasks failed (housekeeping now drains what it owes).
REGRESSIONS = (91, 396, 803, 898)
SEEDS = sorted({*range(24), *REGRESSIONS})
# What a run is made of (`ops`): every kind must occur in a few seeds.
KINDS = {"increment", "increment_id", "increment_many", "increment_many_id", "like", "unlike",
         "view", "track", "track_id", "next_number", "next_number_id", "reset_sequence",
         "reset_counter", "configure_counter", "order", "delivery", "backfill", "fold", "grow",
         "change_partitions", "visit", "extension_legacy", "extension_delivery",
         "extension_sweep", "extension_backfill"}


@pytest.mark.parametrize("seed", SEEDS)
def test_every_invariant_holds(seed: int) -> None:
    """Every checker passes: counters, answers, sequences, trend totals, collection counters,
    extension counters, fencing and promptness, through library resends, late commits, lost
    answers, kills, pauses, changes of P and late deliveries."""
    outcome = world.run(seed)
    assert outcome.ok, describe(outcome, findings=20)


def test_a_run_meets_every_hazard_and_operation() -> None:
    """A few seeds make every kind of operation, have the library resend, commits land tens of
    seconds late, writers and holders struck, and a partition narrow while a writer that used
    an older P lives."""
    outcomes = [world.run(seed) for seed in range(10)]
    ops = sum((o.ops for o in outcomes), Counter[str]())
    tally = sum((o.tally for o in outcomes), Counter[str]())
    assert {kind for kind, n in ops.items() if n} >= KINDS, KINDS - set(ops)
    assert sum(o.library_retries for o in outcomes) > 0
    assert max(o.max_commit_delay_s for o in outcomes) > 40.0
    assert all(tally[hazard] for hazard in ("kills", "pauses", "writer_kills", "writer_pauses",
                                            "enqueue_failures", "late_tasks", "narrowed",
                                            "trigger_kills", "trigger_pauses",
                                            "later_step_failures"))


def test_without_the_protections_straddling_writes_are_lost() -> None:
    """With no overlap, no touch and no sweep, the same kind of schedule loses counts: the
    simulation sees what the protections guard against."""
    assert any(world.run(seed, protected=protections.UNPROTECTED).of("lost")
               for seed in range(8))


def test_four_partitions_and_a_change_of_p_hand_leases_over() -> None:
    """With four partitions, changed once while writers write, tasks of the retired partitions
    are answered RETIRED, and leases of both P change hands (which ones is the schedule's)."""
    outcome = world.run(1, settings=world.Settings(partitions=4, changes=1))
    assert outcome.partitions[0] == 4 and len(outcome.partitions) == 2
    assert outcome.tally["retired"] > 0
    handed_over = {part for part, n in outcome.handovers.items() if n}
    assert all(any(part.endswith(f"of {count}") for part in handed_over)
               for count in outcome.partitions)
    assert not outcome.crashes, outcome.crashes


def test_a_seed_replays_exactly() -> None:
    """The same seed gives the same run."""
    def fingerprint() -> tuple[object, ...]:
        outcome = world.run(5, settings=world.Settings(partitions=2, changes=2))
        return (sorted(outcome.ops.items()), sorted(outcome.tally.items()), outcome.partitions,
                [str(f) for f in outcome.findings], outcome.library_retries)

    assert fingerprint() == fingerprint()
