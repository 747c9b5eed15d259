"""Autoscaling of a counter's shards, as pure functions: sizing, the measured rate, the decision.

The rollup (`counting.rollup.tick`) feeds these with what it measures each tick and applies the
result; nothing here reads or writes Firestore.

- Sizing: `shards_for_rate(rate) = ceil(rate / (shard_write_rate x utilisation))`, clamped.
- Rate: an exponentially weighted moving average of writes/s over irregular ticks, rising with a
  short time constant (a step in load is followed within seconds) and falling with a longer one.
- Decision: grow at once to the size the rate needs when it exceeds the shards' capacity at the
  target utilisation; shrink to that size only after the rate has stayed below the capacity at
  the (lower) shrink utilisation for a cool-down. Under a constant rate the shard count moves in
  one direction to a fixed point and stays there: no flapping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from counting.foundation import config
from counting.foundation.config import AutoscaleParams


@dataclass(frozen=True, kw_only=True)
class Decision:
    num_shards: int
    low_since: float | None  # when the rate went (and stayed) below the shrink line, else None


def shards_for_rate(
    rate: float,
    *,
    shard_write_rate: float = config.AUTOSCALE.shard_write_rate,
    utilisation: float = config.AUTOSCALE.target_utilisation,
    min_shards: int = config.MIN_SHARDS,
    max_shards: int = config.MAX_SHARDS,
) -> int:
    """Shards that carry `rate` writes/s at `utilisation` of each one's capacity, clamped."""
    wanted = math.ceil(rate / (shard_write_rate * utilisation))
    return max(min_shards, min(max_shards, wanted))


def ewma(previous: float, sample: float, dt_s: float, tau_s: float) -> float:
    """An EWMA step for a sample that covers `dt_s` seconds (weight 1 - exp(-dt/tau))."""
    if dt_s <= 0:
        return previous
    alpha = 1.0 - math.exp(-dt_s / tau_s)
    return previous + alpha * (sample - previous)


def measured_rate(previous: float, sample: float, dt_s: float, params: AutoscaleParams) -> float:
    """The next rate estimate: quick to rise, slow to fall."""
    tau = params.rise_tau_s if sample > previous else params.fall_tau_s
    return ewma(previous, sample, dt_s, tau)


def decide(
    num_shards: int,
    rate: float,
    now: float,
    low_since: float | None,
    *,
    min_shards: int,
    max_shards: int,
    params: AutoscaleParams,
) -> Decision:
    """The shard count for the measured `rate` at time `now` (seconds)."""
    if num_shards < min_shards or num_shards > max_shards:
        return Decision(num_shards=max(min_shards, min(max_shards, num_shards)), low_since=None)
    wanted = shards_for_rate(rate, shard_write_rate=params.shard_write_rate,
                             utilisation=params.target_utilisation,
                             min_shards=min_shards, max_shards=max_shards)
    if rate > num_shards * params.shard_write_rate * params.target_utilisation:
        return Decision(num_shards=max(num_shards, wanted), low_since=None)
    low = rate < num_shards * params.shard_write_rate * params.shrink_utilisation
    if num_shards > min_shards and low and wanted < num_shards:
        since = now if low_since is None else low_since
        if now - since >= params.cool_down_s:
            return Decision(num_shards=wanted, low_since=None)
        return Decision(num_shards=num_shards, low_since=since)
    return Decision(num_shards=num_shards, low_since=None)
