"""Fixtures for tests against the Emulator Suite (run them with `make test` or `make emulator`).

The callables are reached over HTTP through the Functions emulator, as clients reach them.
Each test names its documents with a unique suffix, so tests never see each other's data.
Tests that drive the domain in-process use a Firestore client on a project of their own, so
that the stack's rollup loop (which serves demo-counters) never touches their documents.
"""

from __future__ import annotations

import os
import uuid

import pytest
from callables import Callables, User, sign_up
from counting.features.context import Context
from counting.foundation.config import Placement
from google.cloud import firestore

if "COUNTERS_FUNCTIONS_URL" not in os.environ:
    pytest.skip("needs the stack: run through `make test`", allow_module_level=True)


@pytest.fixture
def suffix() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture(scope="session")
def admin_user() -> User:
    return sign_up({"admin": True})


@pytest.fixture(scope="session")
def plain_user() -> User:
    return sign_up()


@pytest.fixture
def user_token(plain_user: User) -> str:
    return plain_user.id_token


@pytest.fixture
def admin(admin_user: User) -> Callables:
    return Callables(admin_user.id_token)


@pytest.fixture
def user(plain_user: User) -> Callables:
    return Callables(plain_user.id_token)


@pytest.fixture
def anonymous() -> Callables:
    return Callables(None)


@pytest.fixture(scope="session")
def db() -> firestore.Client:
    """The stack's own project, as the functions see it."""
    return firestore.Client(project=os.environ["GCLOUD_PROJECT"])


@pytest.fixture
def isolated_db() -> firestore.Client:
    """A fresh project of its own in the Firestore emulator, where no rollup loop runs: tests
    drive their holders in-process."""
    return firestore.Client(project=f"demo-test-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def ctx(request: pytest.FixtureRequest) -> Context:
    """The test's own context of the domain. Its writes wake the stack's rollup, as the deployed
    functions' do; beside an `isolated_db` they wake nothing (the stack's Cloud Tasks serve its
    own project only)."""
    if "isolated_db" in request.fixturenames:
        return Context.offline()
    return Context.for_process(placement=Placement())  # the stack's: the defaults
