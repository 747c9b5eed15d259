"""Distributed counters on Firestore: the domain, with no Cloud Functions imports.

Every function here takes a Firestore client as an argument; the handlers in `counting.api`
validate client input, call the domain and turn its errors into callable error codes.
"""
