"""The features clients call: sharded counters, sequences, trending tags, collection counters."""
