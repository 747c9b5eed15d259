// Every failure ends up here and on screen, in words: nothing is swallowed.

const WORDS = {
  "functions/not-found": "not found",
  "functions/permission-denied": "not allowed",
  "functions/unauthenticated": "not signed in",
  "functions/invalid-argument": "invalid input",
  "functions/failed-precondition": "not ready",
  "functions/unavailable": "the server cannot be reached",
  "functions/internal": "the server failed or cannot be reached",
  "functions/deadline-exceeded": "the server took too long",
  "permission-denied": "not allowed",
  "unavailable": "Firestore cannot be reached",
  "auth/network-request-failed": "the Auth emulator cannot be reached",
  "auth/invalid-credential": "wrong email or password",
  "auth/wrong-password": "wrong email or password",
  "auth/user-not-found": "no such user",
  "auth/invalid-email": "that is not an email address",
};

/** One sentence for the user: what failed, why, and the server's own message when it has one. */
export function describe(what, error) {
  const code = error && error.code ? String(error.code) : "";
  const why = WORDS[code] || (code ? code.replace(/^[a-z]+\//, "").replace(/-/g, " ") : "error");
  const message = error && error.message ? String(error.message) : String(error);
  const detail = message && message.toLowerCase() !== why && message !== code ? `: ${message}` : "";
  return `${what} failed (${why})${detail}`;
}

const list = () => document.getElementById("errors");

/** Show an error until the user dismisses it. Returns the element, so callers can clear it. */
export function showError(text) {
  console.error(text);
  const item = document.createElement("li");
  const words = document.createElement("span");
  words.textContent = text;
  const close = document.createElement("button");
  close.type = "button";
  close.className = "link";
  close.textContent = "dismiss";
  close.addEventListener("click", () => item.remove());
  item.append(words, " ", close);
  list().append(item);
  return item;
}

export function reportUncaught() {
  window.addEventListener("error", (event) => showError(`Unexpected error: ${event.message}`));
  window.addEventListener("unhandledrejection", (event) =>
    showError(describe("Something", event.reason)),
  );
}
