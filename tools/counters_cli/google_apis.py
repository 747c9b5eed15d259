"""Google's REST APIs as `counters doctor` reads a deployed project: one small client per API,
each over one transport (`Fetch`: method, URL, JSON body -> JSON answer), so that tests give
them recorded answers instead of Google (tests/unit/doctor/). Read-only: GETs, and the
POSTs of getIamPolicy, which read a policy.

The resource names are the ones firebase-tools 15.34 creates: a function's id is its codebase's
prefix, a hyphen and its name; a task queue function's queue has the function's id; the
scheduled function's job is `firebase-schedule-<id>-<region>`; a named database's rules are
released as `cloud.firestore/<database>`.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

import google.auth
from google.auth import credentials as auth_credentials
from google.auth.transport.requests import AuthorizedSession

Json = dict[str, Any]
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
TIMEOUT_S = 60.0
# A list answer is read page by page, at most this many (doctor's lists are a few dozen items).
MAX_PAGES = 20
# Asked of every getIamPolicy: version 1 policies would hide the conditions of bindings.
POLICY_V3: Json = {"options": {"requestedPolicyVersion": 3}}


class ApiError(Exception):
    """A Google API refused a call: its HTTP `status` and Google's message."""

    def __init__(self, status: int, message: str, url: str) -> None:
        super().__init__(f"HTTP {status} from {url}: {message}")
        self.status = status


class Fetch(Protocol):
    def __call__(self, method: str, url: str, body: Json | None = None) -> Json: ...


def default_credentials() -> auth_credentials.Credentials:
    """The user's Application Default Credentials (gcloud auth application-default login, or
    GOOGLE_APPLICATION_CREDENTIALS)."""
    found, _ = google.auth.default(scopes=SCOPES)
    return found


def authorized_fetch(credentials: auth_credentials.Credentials) -> Fetch:
    """Calls Google's REST APIs with `credentials` (refreshed as they expire)."""
    session = AuthorizedSession(credentials)  # type: ignore[no-untyped-call]

    def fetch(method: str, url: str, body: Json | None = None) -> Json:
        answer = session.request(  # type: ignore[no-untyped-call]
            method, url, json=body, timeout=TIMEOUT_S)
        if answer.status_code >= 400:
            message = answer.text[:500]
            with contextlib.suppress(ValueError, KeyError, TypeError):  # Google's error shape
                message = str(answer.json()["error"]["message"])
            raise ApiError(answer.status_code, message, url)
        found: Json = answer.json() if answer.content else {}
        return found

    return fetch


def pages(fetch: Fetch, url: str, key: str) -> list[Json]:
    """Every item of a list call, following nextPageToken."""
    items: list[Json] = []
    token = ""
    for _ in range(MAX_PAGES):
        separator = "&" if "?" in url else "?"
        answer = fetch("GET", f"{url}{separator}pageToken={token}" if token else url)
        items.extend(answer.get(key, []))
        token = answer.get("nextPageToken", "")
        if not token:
            return items
    raise ApiError(0, f"more than {MAX_PAGES} pages", url)


class Apis:
    """The APIs of one project and region."""

    def __init__(self, fetch: Fetch, project: str, region: str) -> None:
        self.fetch, self.project, self.region = fetch, project, region
        self._location = f"projects/{project}/locations/{region}"

    # Cloud Functions (2nd gen): name, state, serviceConfig (availableCpu, availableMemory,
    # maxInstanceRequestConcurrency, timeoutSeconds, serviceAccountEmail, service), url.
    def functions(self) -> list[Json]:
        return pages(self.fetch, f"https://cloudfunctions.googleapis.com/v2/{self._location}"
                                 "/functions", "functions")

    # Cloud Tasks: name, state, rateLimits, retryConfig.
    def queues(self) -> list[Json]:
        return pages(self.fetch, f"https://cloudtasks.googleapis.com/v2/{self._location}/queues",
                     "queues")

    def queue_policy(self, queue: str) -> Json:
        return self.fetch("POST", f"https://cloudtasks.googleapis.com/v2/{self._location}"
                                  f"/queues/{queue}:getIamPolicy", POLICY_V3)

    # Cloud Run: the policy of the service a function runs on (projects/P/locations/R/services/S).
    def service_policy(self, service: str) -> Json:
        return self.fetch("GET", f"https://run.googleapis.com/v2/{service}:getIamPolicy"
                                 "?options.requestedPolicyVersion=3")

    # IAM: the policy of a service account (who may act as it).
    def account_policy(self, account: str) -> Json:
        # Its options go in the query string: this method's request body must be empty.
        return self.fetch("POST", f"https://iam.googleapis.com/v1/projects/{self.project}"
                                  f"/serviceAccounts/{account}:getIamPolicy"
                                  "?options.requestedPolicyVersion=3")

    # Resource Manager: the project's IAM policy (projects.getIamPolicy, v1: a POST whose body
    # is a GetIamPolicyRequest).
    def project_policy(self) -> Json:
        return self.fetch("POST", "https://cloudresourcemanager.googleapis.com/v1/projects/"
                                  f"{self.project}:getIamPolicy", POLICY_V3)

    # Resource Manager: projectNumber.
    def project_number(self) -> str:
        found = self.fetch("GET", "https://cloudresourcemanager.googleapis.com/v1/projects/"
                                  f"{self.project}")
        return str(found["projectNumber"])

    # Firestore Admin: a database (type, locationId); its composite indexes (state); its fields
    # with a TTL policy (ttlConfig.state).
    def _database(self, database: str) -> str:
        return f"https://firestore.googleapis.com/v1/projects/{self.project}/databases/{database}"

    def database(self, database: str) -> Json:
        return self.fetch("GET", self._database(database))

    def indexes(self, database: str) -> list[Json]:
        return pages(self.fetch, f"{self._database(database)}/collectionGroups/-/indexes",
                     "indexes")

    def ttl_fields(self, database: str) -> list[Json]:
        return pages(self.fetch, f"{self._database(database)}/collectionGroups/-/fields"
                                 "?filter=ttlConfig:*", "fields")

    # Firebase Rules: the ruleset released to a database, its files' text.
    def released_rules(self, database: str) -> str:
        release = "cloud.firestore" + ("" if database == "(default)" else f"/{database}")
        found = self.fetch("GET", "https://firebaserules.googleapis.com/v1/projects/"
                                  f"{self.project}/releases/{release}")
        ruleset = self.fetch("GET", f"https://firebaserules.googleapis.com/v1/"
                                    f"{found['rulesetName']}")
        return "\n".join(str(file.get("content", ""))
                         for file in ruleset.get("source", {}).get("files", []))

    # Firebase Management: the project's web apps (appId, state).
    def web_apps(self) -> list[Json]:
        return pages(self.fetch, f"https://firebase.googleapis.com/v1beta1/projects/{self.project}"
                                 "/webApps", "apps")

    # Firebase App Check: the reCAPTCHA Enterprise (siteKey) and reCAPTCHA v3 (siteSecretSet)
    # configurations of apps, the web's two attestation providers; one batchGet of each for
    # every app named (at most 100 a call, more than a project's web apps).
    def web_attestations(self, app_ids: list[str]) -> list[Json]:
        parent = f"projects/{self.project_number()}"
        found: list[Json] = []
        for provider in ("recaptchaEnterpriseConfig", "recaptchaV3Config"):
            names = "&".join(f"names={parent}/apps/{app}/{provider}" for app in app_ids)
            found.extend(self.fetch("GET", f"https://firebaseappcheck.googleapis.com/v1/{parent}"
                                           f"/apps/-/{provider}:batchGet?{names}")
                         .get("configs", []))
        return found

    # Cloud Scheduler: a job (state, schedule, lastAttemptTime, status, httpTarget).
    def job(self, job: str) -> Json:
        return self.fetch("GET", f"https://cloudscheduler.googleapis.com/v1/{self._location}"
                                 f"/jobs/{job}")
