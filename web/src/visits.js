// A post's page visits: the extension counter visits:{page} over pages/{post}, counted as the
// clients of Firebase's Distributed Counter extension count (extensionCounter of
// @counters/client): this device merges increments into a shard of its own,
// pages/{post}/_counter_shards_/{its id}, and shows the page's `visits` plus its shard's and
// partials'; beside it, the total the backend counts from every document of that layout,
// counters/visits:{post}. Each write is listed with its outcome: the rules refuse a change other
// than -1..1. Self-contained: it builds its card in <section id="visits">.
import { declaredCounterId, extensionCounter, firebaseTransport } from "@counters/client";
import { onAuthStateChanged } from "firebase/auth";
import { doc, increment, onSnapshot, setDoc } from "firebase/firestore";
import { httpsCallable } from "firebase/functions";
import { clearErrors, describe, showError } from "./errors.js";

// The extension counter functions/declarations.json declares over pages/{page}, and its field.
const DECLARATION = "visits";
const FIELD = "visits";
// The writes listed, newest first.
const LISTED = 5;
// Error banner topics.
const VIEW = "visits-view";
const TOTAL = "visits-total";

function card(section) {
  section.innerHTML = `
    <h2>Page visits</h2>
    <p class="muted">As the clients of Firebase's Distributed Counter extension count: this device
      adds to a shard of its own, the backend counts every shard and moves them into the page.</p>
    <form id="visit-form" class="row">
      <label>Add <input id="visit-by" type="number" step="1" value="1" size="3" /></label>
      <button id="visit-add" type="submit" disabled>Add</button>
    </form>
    <dl class="facts">
      <dt>This device's view</dt>
      <dd><output id="visits-view" aria-label="visits as this device sees them">...</output></dd>
      <dt>Total</dt>
      <dd><output id="visits-total" aria-label="total visits">...</output></dd>
    </dl>
    <p class="muted">Shard <code id="visits-shard"></code> of <code id="visits-page"></code>;
      the rules let a signed-in visitor change it by -1 to 1 at a time.</p>
    <ul id="visit-writes" class="muted"></ul>`;
  section.hidden = false;
}

export function startVisits({ db, auth, functions }, post) {
  const section = document.getElementById("visits");
  card(section);
  const $ = (id) => document.getElementById(id);
  $("visits-page").textContent = `pages/${post}`;
  let counter;
  try {
    counter = extensionCounter(db, { doc, increment, onSnapshot, setDoc }, `pages/${post}`, FIELD);
  } catch (error) {
    // A post id with "/" names no page: nothing to count.
    showError(describe("Page visits", error), VIEW);
    return;
  }
  $("visits-shard").textContent = counter.shardId;
  counter.onSnapshot((value) => {
    clearErrors(VIEW);
    $("visits-view").textContent = String(value);
  }, (error) => showError(describe(`Listening to pages/${post}`, error), VIEW));

  const transport = firebaseTransport({ db, functions }, { doc, onSnapshot }, { httpsCallable });
  declaredCounterId(DECLARATION, post)
    .then((id) => {
      $("visits-total").dataset.counter = id;
      transport.listen(id, (data) => {
        clearErrors(TOTAL);
        // The backend creates the counter with the page's first counted write.
        $("visits-total").textContent = String(data?.count ?? 0);
      }, (error) => showError(describe(`Listening to counters/${id}`, error), TOTAL));
    })
    .catch((error) => showError(describe("The visits counter", error), TOTAL));

  onAuthStateChanged(auth, (user) => {
    $("visit-add").disabled = !user;
  });
  $("visit-form").addEventListener("submit", (event) => {
    event.preventDefault();
    if (auth.currentUser) add(counter, $("visit-by").valueAsNumber);
  });
}

/** One write, listed with its outcome: pending until Firestore answers, then written or refused. */
function add(counter, by) {
  const label = by > 0 ? `+${by}` : String(by);
  const item = document.createElement("li");
  item.dataset.by = String(by);
  item.dataset.outcome = "pending";
  item.textContent = `${label}: sending...`;
  const list = document.getElementById("visit-writes");
  list.prepend(item);
  while (list.children.length > LISTED) list.lastElementChild.remove();
  counter.incrementBy(by).then(() => {
    item.dataset.outcome = "written";
    item.textContent = `${label}: written`;
  }, (error) => {
    item.dataset.outcome = error?.code ?? error?.name ?? "error";
    item.textContent = `${label}: refused (${item.dataset.outcome})`;
    showError(describe(`Adding ${label} visits`, error));
  });
}
