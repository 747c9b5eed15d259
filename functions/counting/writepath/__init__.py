"""The write path's own machinery: write policies, the per-instance configuration cache and the
wake-up of the rollup after a write."""
