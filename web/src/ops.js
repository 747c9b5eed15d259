// The operations dashboard (ops.html), for admins: every counter with its live count and a plot
// of its write rate and shard count, its policy and strategy; the rollup's health from its
// partitions' lease documents (health.js); the trends of every region. Listing collections and
// reading internal/rollup* are for admins only (firestore.rules): anyone else sees the refusal. It
// runs on a Firebase app of its own, so signing in here never replaces the app page's anonymous
// user.
import { onAuthStateChanged, signInWithEmailAndPassword, signOut } from "firebase/auth";
import { collection, doc, onSnapshot } from "firebase/firestore";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { connect, LOCAL, loadConfig } from "./backend.js";
import { clearErrors, describe, reportUncaught, showError } from "./errors.js";
import { auditSummary, leaseIds, partitionCount, rollupHealth } from "./health.js";
import { rateNow } from "./rate.js";

const WINDOW_S = 5 * 60;
// A plot spans its data, and a minute at least (a fresh plot is not a sliver of the window).
const MIN_SPAN_S = 60;
const SAMPLE_MS = 1000;
// Plots beyond this many counters would cost more than they show: the busiest ones get them.
const PLOTTED = 24;
// The demo admin tools/demo.py seeds in the emulator.
const DEMO_ADMIN = { email: "admin@demo.test", password: "demo-password" };
const SIGN_IN = "sign-in";
const COUNTERS = "counters";
const HEALTH = "health";
const TRENDS = "trends";

reportUncaught();
const { auth, db } = connect(await loadConfig(), { name: "ops" });
const $ = (id) => document.getElementById(id);
$("window-minutes").textContent = String(WINDOW_S / 60);
if (LOCAL) {
  $("admin-email").value = DEMO_ADMIN.email;
  $("admin-password").value = DEMO_ADMIN.password;
}

$("admin-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  $("admin-sign-in").disabled = true;
  try {
    await signInWithEmailAndPassword(auth, $("admin-email").value.trim(), $("admin-password").value);
  } catch (error) {
    showError(describe("Sign-in", error), SIGN_IN);
  } finally {
    $("admin-sign-in").disabled = false;
  }
});
$("admin-sign-out").addEventListener("click", () => {
  signOut(auth).catch((error) => showError(describe("Sign-out", error), SIGN_IN));
});

let stop = () => {};
onAuthStateChanged(auth, (user) => {
  stop();
  stop = () => {};
  clearErrors(SIGN_IN, COUNTERS, HEALTH, TRENDS);
  $("admin-form").hidden = Boolean(user);
  $("dashboard").hidden = !user;
  $("who").textContent = user ? `Signed in as ${user.email ?? user.uid}` : "Signed out";
  // Whatever the account's claims, the reads are made: the rules decide, and their refusal shows.
  if (user) stop = startDashboard();
});

function startDashboard() {
  const series = new Map(); // counter id -> {data, xs, rate, shards, card, plot}
  const stops = [
    watchCounters(series),
    watchHealth(),
    watchTrends(),
  ];
  const timer = setInterval(() => sample(series), SAMPLE_MS);
  const filter = () => showCards(series);
  $("counter-filter").addEventListener("input", filter);
  return () => {
    clearInterval(timer);
    $("counter-filter").removeEventListener("input", filter);
    for (const end of stops) end();
    $("counters").replaceChildren();
    $("regions").replaceChildren();
    $("health-plot").replaceChildren();
  };
}

function watchCounters(series) {
  return onSnapshot(collection(db, "counters"), (snap) => {
    clearErrors(COUNTERS);
    $("counter-total").textContent = `(${snap.size})`;
    const seen = new Set();
    for (const found of snap.docs) {
      seen.add(found.id);
      let entry = series.get(found.id);
      if (!entry) {
        entry = { xs: [], rate: [], shards: [], card: counterCard(found.id), plot: null };
        series.set(found.id, entry);
      }
      entry.data = found.data();
      renderCounter(entry);
    }
    for (const [id, entry] of series) {
      if (seen.has(id)) continue;
      entry.plot?.destroy();
      entry.card.remove();
      series.delete(id);
    }
    showCards(series);
    sample(series);
  }, (error) => showError(describe("Listing counters", error), COUNTERS));
}

/** The cards of the counters whose id contains the filter's text, by id. */
function showCards(series) {
  const wanted = $("counter-filter").value.trim();
  const ids = [...series.keys()].filter((id) => id.includes(wanted)).sort();
  $("counters").replaceChildren(...ids.map((id) => series.get(id).card));
}

function counterCard(id) {
  const card = document.createElement("article");
  card.className = "counter";
  card.dataset.counter = id;
  card.innerHTML = `<h3></h3><dl class="facts"><dt>kind</dt><dd class="kind"></dd>
    <dt>count</dt><dd class="count"></dd><dt>shards</dt><dd class="shards"></dd>
    <dt>writes/s</dt><dd class="rate"></dd><dt>strategy</dt><dd class="strategy"></dd>
    <dt>policy</dt><dd class="policy"></dd></dl><div class="plot"></div>`;
  card.querySelector("h3").textContent = id;
  return card;
}

function renderCounter({ card, data }) {
  const set = (name, text) => { card.querySelector(`.${name}`).textContent = text; };
  // The id alone does not say what writes a counter (the claps of demo-post are `demo-post`).
  set("kind", data.collection ? `collection counter (${data.collection})` : "sharded (increment)");
  set("count", String(data.count ?? 0));
  set("shards", String(data.num_shards ?? "?"));
  set("rate", rateNow(data).toFixed(2));
  set("strategy", data.strategy ?? "random");
  set("policy", policyText(data.policy));
}

/** A policy in a few words; absent fields are the defaults (CONTRACT: write policy). */
function policyText(policy = {}) {
  const words = [];
  if (policy.writers === "admins") words.push("admins only");
  if (policy.unique) words.push("unique per user");
  if (policy.min_interval_s) words.push(`once per ${policy.min_interval_s} s per user`);
  const [low, high] = policy.by ?? [1, 1];
  if (!policy.unique && !(low === 1 && high === 1)) words.push(`by ${low}..${high}`);
  return words.length ? words.join(", ") : "default (+1 by users)";
}

/** One sample of every counter's rate and shards; plots for the busiest ones. */
function sample(series) {
  const now = Date.now() / 1000;
  const busiest = [...series.entries()]
    .sort(([, a], [, b]) => rateNow(b.data) - rateNow(a.data))
    .slice(0, PLOTTED).map(([id]) => id);
  for (const [id, entry] of series) {
    const last = entry.xs.length ? entry.xs[entry.xs.length - 1] : 0;
    if (now - last >= SAMPLE_MS / 2000) {
      entry.xs.push(now);
      entry.rate.push(rateNow(entry.data));
      // The rate falls between the rollup's writes: shown as readers decay it.
      entry.card.querySelector(".rate").textContent = entry.rate[entry.rate.length - 1].toFixed(2);
      entry.shards.push(Number(entry.data.num_shards ?? 0));
    }
    while (entry.xs.length && entry.xs[0] < now - WINDOW_S) {
      entry.xs.shift();
      entry.rate.shift();
      entry.shards.shift();
    }
    const box = entry.card.querySelector(".plot");
    // What the plot shows, for tests and for reading without eyes.
    box.dataset.maxRate = String(Math.max(0, ...entry.rate));
    box.dataset.shards = entry.shards.join(" ");
    if (busiest.includes(id)) {
      const data = [entry.xs, entry.rate, entry.shards];
      if (entry.plot) entry.plot.setData(data);
      else entry.plot = new uPlot(plotOptions(box, "writes/s", "shards"), data, box);
    } else if (entry.plot) {
      entry.plot.destroy();
      entry.plot = null;
    }
  }
}

/** A time of day, 21:35:07 (21:35 when `seconds` is false). */
function clock(epochSeconds, seconds = true) {
  return new Date(epochSeconds * 1000).toLocaleTimeString([], {
    hourCycle: "h23", hour: "2-digit", minute: "2-digit", ...(seconds ? { second: "2-digit" } : {}),
  });
}

const amount = (value) => String(Number(value.toFixed(3)));
// From 0, with room above the highest value; all-zero data gets 0..1 (uPlot's default: 0..100).
const fromZero = (u, min, max) => [0, max > 0 ? max * 1.1 : 1];

/** A legend value: the hovered point's, else the latest one (uPlot's default shows "--"). */
const latest = (format) => (u, value, series, idx) => {
  const values = u.data[series];
  const shown = idx === null ? values[values.length - 1] : value;
  return shown === null || shown === undefined ? "--" : format(shown);
};

/** A plot of the last WINDOW_S seconds, `left` and `right` against time. The axes are drawn on
 * a canvas: their labels are kept on `box` too (data-time-axis, data-left-axis, data-right-axis),
 * for tests and for reading without eyes. */
function plotOptions(box, left, right) {
  const labels = (name, format) => (u, splits) => {
    const texts = splits.map(format);
    box.dataset[name] = texts.join(" ");
    return texts;
  };
  return {
    width: Math.max(240, box.clientWidth || 320),
    height: 140,
    legend: { show: true },
    scales: {
      x: { time: true, range: (u, min, max) => [Math.min(min, max - MIN_SPAN_S), max] },
      y: { range: fromZero },
      right: { range: fromZero },
    },
    series: [
      { value: latest(clock) },
      { label: left, stroke: "#c62452", width: 2, value: latest(amount) },
      { label: right, stroke: "#2458c6", width: 2, scale: "right", value: latest(amount),
        paths: uPlot.paths.stepped({ align: 1 }) },
    ],
    axes: [
      // Times of day, seconds only off the minute (uPlot's own labels read :10.000 over a short
      // span); steps of 15 s at least, as the span is a minute at least.
      { space: 70, incrs: [15, 30, 60, 120, 300],
        values: labels("timeAxis", (at, i, splits) => clock(at, splits.some((s) => s % 60 !== 0))) },
      { size: 50, values: labels("leftAxis", amount) },
      { side: 1, scale: "right", grid: { show: false }, size: 50, values: labels("rightAxis", amount) },
    ],
  };
}

/** The rollup's health: P from internal/rollup_partitions, then the lease document of each of
 * the P partitions (listened to again when P changes), merged by `rollupHealth`. */
function watchHealth() {
  const xs = [];
  const tick = [];
  const lag = [];
  let plot = null;
  let lastRenewed = null;
  let count = 0;
  let leases = [];
  const failed = (error) => showError(describe("Reading the rollup's health", error), HEALTH);
  const stopLeases = () => {
    for (const end of leases) end();
    leases = [];
  };
  const show = (records) => {
    clearErrors(HEALTH);
    const health = rollupHealth(records);
    $("health-facts").replaceChildren(...health.facts.flatMap(([name, value]) => {
      const dt = document.createElement("dt");
      dt.textContent = name;
      const dd = document.createElement("dd");
      dd.textContent = value;
      dd.dataset.fact = name;
      return [dt, dd];
    }));
    $("health-partitions").hidden = !health.partitions.length;
    $("health-partitions").tBodies[0].replaceChildren(...health.partitions.map(({ name, facts, stale }) => {
      const row = document.createElement("tr");
      row.dataset.partition = name;
      row.classList.toggle("stale", stale);
      row.append(...[name, ...facts.map(([, value]) => value)].map((text) => {
        const cell = document.createElement("td");
        cell.textContent = text;
        return cell;
      }));
      return row;
    }));
    const errors = health.errors;
    $("health-errors").replaceChildren(...(errors.length ? errors : ["no recent errors"]).map((text) => {
      const item = document.createElement("li");
      item.textContent = text;
      return item;
    }));
    const { point } = health;
    // Only a later renewal adds a point: a new P's leases may carry older ones.
    if (point && (lastRenewed === null || point.at > lastRenewed)) {
      lastRenewed = point.at;
      xs.push(point.at);
      tick.push(point.tick);
      lag.push(point.lag);
      while (xs.length && xs[0] < xs[xs.length - 1] - WINDOW_S) {
        xs.shift();
        tick.shift();
        lag.shift();
      }
      const box = $("health-plot");
      if (plot) plot.setData([xs, tick, lag]);
      else plot = new uPlot(plotOptions(box, "tick s", "lag s"), [xs, tick, lag], box);
    }
  };
  const stopAudit = onSnapshot(doc(db, "internal", "audit"), (snap) => {
    const { text, drift } = auditSummary(snap.data());
    $("health-audit").textContent = text;
    $("health-audit").classList.toggle("drift", drift);
  }, failed);
  const stopCount = onSnapshot(doc(db, "internal", "rollup_partitions"), (snap) => {
    const wanted = partitionCount(snap.data());
    if (wanted === count) return;
    stopLeases();
    count = wanted;
    const records = Array(count).fill(undefined);
    leases = leaseIds(count).map((id, index) => onSnapshot(doc(db, "internal", id), (lease) => {
      records[index] = lease.data();
      show(records);
    }, failed));
  }, failed);
  return () => {
    stopAudit();
    stopCount();
    stopLeases();
  };
}

function watchTrends() {
  return onSnapshot(collection(db, "trends"), (snap) => {
    clearErrors(TRENDS);
    const regions = snap.docs.map((found) => {
      const data = found.data();
      const box = document.createElement("article");
      box.className = "region";
      box.dataset.region = found.id;
      const title = document.createElement("h3");
      title.textContent = found.id;
      box.append(title);
      for (const window of ["1h", "24h"]) {
        const shown = data.windows?.[window] ?? (data.window === window ? data : null);
        const line = document.createElement("p");
        const items = (shown?.items ?? []).slice(0, 5).map(({ tag, count }) => `#${tag} ${count}`);
        line.textContent = `${window}: ${items.length ? items.join(", ") : "nothing"}`;
        box.append(line);
      }
      return box;
    });
    $("regions").replaceChildren(...(regions.length ? regions : [Object.assign(document.createElement("p"),
      { className: "muted", textContent: "No region has trends yet." })]));
  }, (error) => showError(describe("Listing trends", error), TRENDS));
}
