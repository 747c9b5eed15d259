"""Distributed counters on Firestore: the domain, with no Cloud Functions imports.

Four floors, each importing only from the ones before it: `foundation` (configuration, names,
inputs, errors, how a commit is sent), `writepath` (policies, the configuration cache, the
rollup's wake-up), `rollup` (partitions, the holder and its tick, the pure ledger, the store) and
`features` (counters, sequences, trends, collection counters). Every function here takes a
Firestore client as an argument; the handlers (the `handlers` package beside this one) validate
client input, call the domain and turn its errors into callable error codes.
"""
