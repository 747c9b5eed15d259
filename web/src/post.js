// The post card: the like button and the latency-compensated count (see likes.js).
import { doc, onSnapshot } from "firebase/firestore";
import { clearErrors, describe, showError } from "./errors.js";
import {
  incrementOnce,
  LikeCount,
  Limiter,
  newRequestId,
  rfc3339Micros,
  timestampMicros,
} from "./likes.js";

const IN_FLIGHT = 4;
// Error banner topics: the post's document, and liking it.
const LISTEN = "post";
const LIKE = "like";

export function startPost({ db, callable }, counter) {
  const button = document.getElementById("like");
  const output = document.getElementById("like-count");
  const detail = document.getElementById("like-detail");
  document.getElementById("post-id").textContent = counter;

  const likes = new LikeCount();
  const limiter = new Limiter(IN_FLIGHT);
  const increment = callable("increment");
  let sending = 0;
  let retrying = 0;
  let retryReason = "";
  let exists = false;

  function render() {
    const shown = likes.displayed;
    output.textContent = shown === null ? "..." : String(shown);
    output.dataset.rollup = likes.rollup ? String(likes.rollup.count) : "";
    output.dataset.unconfirmed = String(likes.unconfirmed);
    output.dataset.sending = String(sending);
    const parts = [];
    if (likes.rollup) {
      parts.push(`${likes.rollup.count} counted by the rollup`);
      if (likes.unconfirmed) parts.push(`+ ${likes.unconfirmed} of yours it has not counted yet`);
    }
    if (sending) parts.push(`${sending} sending`);
    if (retrying) parts.push(`${retrying} retrying after: ${retryReason}`);
    detail.textContent = parts.join(", ");
  }

  onSnapshot(
    doc(db, "counters", counter),
    (snap) => {
      clearErrors(LISTEN);
      exists = snap.exists();
      if (!exists) {
        likes.rollup = null;
        output.textContent = "no such post";
        output.classList.add("missing");
        detail.textContent = `Counter "${counter}" does not exist: an admin creates it with create_counter (make dev seeds demo-post).`;
        button.disabled = true;
        return;
      }
      const data = snap.data();
      const asOf = data.updated_at ? timestampMicros(data.updated_at) : 0n;
      output.classList.remove("missing");
      likes.onRollup(Number(data.count ?? 0), asOf);
      button.disabled = false;
      render();
    },
    (error) => showError(describe(`Listening to counters/${counter}`, error), LISTEN),
  );

  button.addEventListener("click", () => {
    const requestId = newRequestId();
    sending += 1;
    render();
    let retried = false;
    limiter
      .run(() =>
        incrementOnce(increment, counter, requestId, (attempt, error) => {
          if (!retried) retrying += 1;
          retried = true;
          retryReason = describe(`attempt ${attempt}`, error);
          render();
        }),
      )
      .then((result) => {
        // A malformed commit time throws into the catch below: shown, not hidden.
        const committed = result.applied ? rfc3339Micros(result.committed_at) : null;
        likes.onAck(requestId, 1, committed);
        clearErrors(LIKE);
      })
      .catch((error) => showError(describe("Like", error), LIKE))
      .finally(() => {
        sending -= 1;
        if (retried) retrying -= 1;
        render();
      });
  });
}

