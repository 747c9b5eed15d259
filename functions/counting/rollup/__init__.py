"""The rollup: partitions and their records, the holder's cadence, the pure ledger and its tick,
the store it reads and commits through, folding, autoscaling, health and the exactness audit."""
