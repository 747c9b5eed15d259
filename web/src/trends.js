// The trending panel: listens to trends/{region} and shows one window's top tags.
import { doc, onSnapshot } from "firebase/firestore";
import { clearErrors, describe, showError } from "./errors.js";

// A region is typed in any case and read in lowercase; `global` is the sum of all regions (the
// operator command `counters top --region` takes the same names).
const REGION = /^[a-z0-9-]{1,64}$/;
// The error banner topic of this panel.
const TOPIC = "trends";
const SHOWN = 10;

/** The {items, trending} of `window` in a trends document: from `windows` when the document has
 * it, else from the top-level fields when they are that window. */
export function windowOf(data, window) {
  if (data.windows && data.windows[window]) return data.windows[window];
  if (!data.windows && data.window === window) return data;
  return null;
}

export function startTrends({ db }) {
  const form = document.getElementById("trends-form");
  const regionInput = document.getElementById("region");
  const windowSelect = document.getElementById("window");
  const status = document.getElementById("trends-status");
  const list = document.getElementById("trend-items");
  let unsubscribe = () => {};
  let latest = null;
  let region = "";

  function render() {
    list.replaceChildren();
    if (latest === null) return;
    if (!latest.exists()) {
      status.textContent = `No trends yet for "${region}".`;
      return;
    }
    const data = latest.data();
    const shown = windowOf(data, windowSelect.value);
    const updated = data.updated_at ? data.updated_at.toDate().toLocaleTimeString() : "unknown";
    if (!shown) {
      status.textContent = `No ${windowSelect.value} window for "${region}" (updated ${updated}).`;
      return;
    }
    const items = shown.items ?? [];
    const trending = new Set(shown.trending ?? []);
    status.textContent = items.length
      ? `Top ${Math.min(SHOWN, items.length)} of ${items.length} in ${region}, last ${windowSelect.value} (updated ${updated}).`
      : `No tags in the last ${windowSelect.value} for "${region}".`;
    for (const { tag, count } of items.slice(0, SHOWN)) {
      const item = document.createElement("li");
      item.dataset.tag = tag;
      item.textContent = `#${tag} `;
      const number = document.createElement("span");
      number.className = "muted";
      number.textContent = String(count);
      item.append(number);
      if (trending.has(tag)) {
        const badge = document.createElement("span");
        badge.className = "badge";
        badge.textContent = "trending";
        item.append(" ", badge);
      }
      list.append(item);
    }
  }

  function listen() {
    const wanted = regionInput.value.trim().toLowerCase();
    if (!REGION.test(wanted)) {
      status.textContent = `"${wanted}" is not a region: use 1 to 64 of a-z, 0-9 and -.`;
      return;
    }
    if (wanted === region) return;
    unsubscribe();
    clearErrors(TOPIC);
    region = wanted;
    latest = null;
    status.textContent = `Loading trends for "${region}"...`;
    list.replaceChildren();
    unsubscribe = onSnapshot(
      doc(db, "trends", region),
      (snap) => {
        clearErrors(TOPIC);
        latest = snap;
        render();
      },
      (error) => {
        status.textContent = describe(`Listening to trends/${region}`, error);
        showError(status.textContent, TOPIC);
      },
    );
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    listen();
  });
  regionInput.addEventListener("change", listen);
  windowSelect.addEventListener("change", render);
  listen();
}
