// The post card: a like toggle (a `unique` counter: one like per user, `mine` from get_count),
// claps (each tap +1, queued offline) and views (a `min_interval_s` counter the page counts once
// per load). Counting, queueing and reconciliation live in @counters/client; this file draws.
import { newRequestId, TRANSIENT, withRetries, withTimeout } from "@counters/client";
import { clearErrors, describe, showError } from "./errors.js";

// Error banner topics: the post's documents; tapping.
const LISTEN = "post";
const TAP = "tap";
// A callable still waiting for a token (App Check offline) must not hang the page.
const CALL_TIMEOUT_MS = 30000;

/** The counters of post `post`: claps is the post's own counter (what `?post=` names). */
export const postCounters = (post) => ({ claps: post, likes: `likes:${post}`, views: `views:${post}` });

export function startPost(client, transport, post) {
  const names = postCounters(post);
  document.getElementById("post-id").textContent = post;
  const network = document.getElementById("network");

  function renderNetwork() {
    const queued = client.queued().length;
    network.hidden = navigator.onLine && queued === 0;
    network.textContent = navigator.onLine
      ? `Sending ${queued} tap${queued === 1 ? "" : "s"}...`
      : `Offline: ${queued} tap${queued === 1 ? "" : "s"} waiting on this device.`;
  }

  startClaps(client, names.claps, renderNetwork);
  const { refreshMine, answered } = startLike(client, transport, names.likes, renderNetwork);
  const countView = startViews(client, transport, names.views);
  client.onAnswered = (tap, answer) => {
    if (tap.counter === names.likes) answered(tap, answer);
  };
  client.onRejected = (tap, error) => {
    showError(describe(`Counting your tap on ${tap.counter}`, error), TAP);
    if (tap.ordered) refreshMine();
  };
  client.onTransientError = renderNetwork;
  addEventListener("online", () => {
    renderNetwork();
    void client.flush().then(renderNetwork);
  });
  addEventListener("offline", renderNetwork);
  // Once signed in, and again whenever the user changes: what needs the user (mine, this
  // page load's view once, sending the queued taps).
  let viewCounted = false;
  return () => {
    void refreshMine({ forget: true });
    if (!viewCounted) {
      viewCounted = true;
      countView();
    }
    void client.flush().then(renderNetwork);
  };
}

function show(output, state, missing) {
  output.classList.toggle("missing", !state.exists);
  output.textContent = !state.exists ? missing : state.shown === null ? "..." : String(state.shown);
  output.dataset.rollup = state.rollup === null ? "" : String(state.rollup);
  output.dataset.unconfirmed = String(state.unconfirmed);
  output.dataset.pending = String(state.pending);
}

function startClaps(client, counter, renderNetwork) {
  const button = document.getElementById("clap");
  const output = document.getElementById("clap-count");
  const detail = document.getElementById("clap-detail");
  client.watch(counter, (state) => {
    clearErrors(LISTEN);
    show(output, state, "no such post");
    button.disabled = !state.exists;
    const parts = [];
    if (!state.exists) {
      parts.push(`Counter "${counter}" does not exist: an admin creates it with create_counter (make dev seeds demo-post).`);
    } else if (state.rollup !== null) {
      parts.push(`${state.rollup} counted by the rollup`);
      if (state.unconfirmed) parts.push(`+ ${state.unconfirmed} of yours it has not counted yet`);
      if (state.pending) parts.push(`+ ${state.pending} pending`);
    }
    detail.textContent = parts.join(", ");
    renderNetwork();
  }, (error) => showError(describe(`Listening to counters/${counter}`, error), LISTEN));
  button.addEventListener("click", () => {
    client.tap(counter).then(() => clearErrors(TAP), (error) => showError(describe("Clap", error), TAP));
  });
}

function startLike(client, transport, counter, renderNetwork) {
  const button = document.getElementById("like");
  const output = document.getElementById("like-count");
  // Whether the server counts this user, from get_count; null until it answered. What the button
  // shows is that, unless a toggle is still queued: then the last one says what it will be.
  let serverMine = null;
  const mine = () => {
    const queued = client.queued(counter);
    return queued.length ? queued[queued.length - 1].by > 0 : serverMine;
  };
  function render(state = client.state(counter)) {
    show(output, state, "no likes here");
    const liked = mine();
    button.disabled = !state.exists || liked === null;
    button.setAttribute("aria-pressed", String(Boolean(liked)));
    button.textContent = liked ? "\u2665 Liked" : "\u2661 Like";
  }
  client.watch(counter, (state) => {
    render(state);
    renderNetwork();
  }, (error) => showError(describe(`Listening to counters/${counter}`, error), LISTEN));

  /** forget: the user changed, what the server said of the previous one no longer holds. */
  async function refreshMine({ forget = false } = {}) {
    if (forget) {
      serverMine = null;
      render();
    }
    try {
      const answer = await withRetries(() => withTimeout(transport.getCount({ counter }), CALL_TIMEOUT_MS));
      if (typeof answer.mine === "boolean") serverMine = answer.mine;
    } catch (error) {
      // Offline (or a missing likes counter) is not an error: the button waits for the network.
      if (error?.code !== "functions/not-found" && !TRANSIENT.has(error?.code)) {
        showError(describe("Reading your like", error), TAP);
      }
    }
    render();
  }
  button.addEventListener("click", () => {
    const by = mine() ? -1 : 1;
    client.tap(counter, { by, ordered: true }).then(
      () => { clearErrors(TAP); render(); },
      (error) => showError(describe("Like", error), TAP),
    );
  });
  // Offline, get_count fails and the button stays disabled until the network is back.
  addEventListener("online", () => { if (serverMine === null) void refreshMine(); });
  function answered(tap, answer) {
    // Applied (now, or earlier when a retry answers the first commit time): the server counts
    // this user or not, as the toggle said. Not applied: it was so already (another tab, a
    // stale `mine`): ask it.
    if (answer.applied || answer.committed_at !== undefined) serverMine = tap.by > 0;
    else void refreshMine();
    render();
  }
  return { refreshMine, answered };
}

/** Count this page load as a view. Views are rate limited per user (`min_interval_s`), so a
 * reload within the interval is refused (RESOURCE_EXHAUSTED): that is said, not shown as an error. */
function startViews(client, transport, counter) {
  const output = document.getElementById("views-count");
  const detail = document.getElementById("views-detail");
  let outcome = "";
  function render(state = client.state(counter)) {
    output.textContent = !state.exists ? "no" : state.shown === null ? "..." : String(state.shown);
    const every = state.data?.policy?.min_interval_s;
    detail.textContent = outcome === "too soon"
      ? `yours was counted recently (one view per user${every ? ` every ${every} s` : ""})`
      : outcome;
  }
  client.watch(counter, render);
  const requestId = newRequestId("view");
  const retryable = new Set(["functions/internal", "functions/unavailable", "functions/deadline-exceeded"]);
  return () => withRetries(() => withTimeout(transport.increment({ counter, by: 1, request_id: requestId }),
    CALL_TIMEOUT_MS), { transient: retryable })
    .then(() => { outcome = "yours counted"; })
    .catch((error) => {
      if (error?.code === "functions/resource-exhausted") outcome = "too soon";
      else if (error?.code === "functions/not-found") outcome = "this post counts no views";
      else outcome = describe("Counting your view", error);
    })
    .finally(() => render());
}
