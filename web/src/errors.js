// Every failure ends up here and on screen, in words: nothing is swallowed. A banner belongs to a
// topic (the thing that failed): a new failure of the same thing replaces it, and the caller
// clears it once that thing works again, so one mistake shows as one banner.

const WORDS = {
  "functions/not-found": "not found",
  "functions/permission-denied": "not allowed",
  "functions/unauthenticated": "not signed in",
  "functions/invalid-argument": "invalid input",
  "functions/failed-precondition": "not ready",
  "functions/unavailable": "the server cannot be reached",
  "functions/internal": "the server failed or cannot be reached",
  "functions/deadline-exceeded": "the server took too long",
  "functions/resource-exhausted": "refused: too soon or too often",
  "counters/user-changed": "sent before as another user, who may have been counted for it",
  "counters/expired": "sent more than a day ago without an answer: sending it again could count it twice",
  "counters/gave-up": "the server kept failing",
  "permission-denied": "not allowed",
  "unavailable": "Firestore cannot be reached",
  "auth/network-request-failed": "the Auth emulator cannot be reached",
  "auth/invalid-credential": "wrong email or password",
  "auth/wrong-password": "wrong email or password",
  "auth/user-not-found": "no such user",
  "auth/invalid-email": "that is not an email address",
};

// Firestore's denials carry the rules' evaluation trace ("false for 'get' @ L17"): for the
// developer's console, not for the page.
const TRACE_ONLY = new Set(["permission-denied"]);

/** One sentence for the user: what failed, why, and the server's own message when it has one. */
export function describe(what, error) {
  const code = error && error.code ? String(error.code) : "";
  const why = WORDS[code] || (code ? code.replace(/^[a-z]+\//, "").replace(/-/g, " ") : "error");
  if (TRACE_ONLY.has(code)) {
    console.info(`${what}: ${error.message}`);
    return `${what} failed (${why})`;
  }
  const message = error && error.message ? String(error.message) : String(error);
  const detail = message && message.toLowerCase() !== why && message !== code ? `: ${message}` : "";
  return `${what} failed (${why})${detail}`;
}

const list = () => document.getElementById("errors");

/** Show an error until the user dismisses it or `clearErrors(topic)` runs; it replaces the
 * banner of the same topic. Without a topic it is a banner of its own. */
export function showError(text, topic = "") {
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
  item.dataset.topic = topic;
  const earlier = topic ? banners(topic) : [];
  if (earlier.length) earlier[0].replaceWith(item);
  else list().append(item);
}

/** Remove the banners of these topics: what they reported works again, or no longer applies. */
export function clearErrors(...topics) {
  for (const topic of topics) for (const item of banners(topic)) item.remove();
}

const banners = (topic) => [...list().children].filter((item) => item.dataset.topic === topic);

export function reportUncaught() {
  window.addEventListener("error", (event) => showError(`Unexpected error: ${event.message}`));
  window.addEventListener("unhandledrejection", (event) =>
    showError(describe("Something", event.reason)),
  );
}
