// The service worker: the app shell loads offline. It answers only same-origin GETs of the app
// itself; every Firebase call (Auth, Firestore, Functions: other origins, and Hosting's reserved
// /__/ paths except the config) goes to the network untouched, so it never serves a stale count
// and never stands between the SDK and the emulators.
const CACHE = "counters-shell-v1";
// A network that neither answers nor fails (a weak signal, a captive portal) must not keep the
// page blank: after this long the cached copy answers, if there is one.
const NETWORK_TIMEOUT_MS = 3000;
// What the page needs besides the bundle, which install() reads from index.html.
const SHELL = ["/", "/manifest.webmanifest", "/favicon.svg", "/icon-192.png", "/icon-512.png",
  "/__/firebase/init.json"];

self.addEventListener("install", (event) => {
  event.waitUntil((async () => {
    const cache = await caches.open(CACHE);
    await cache.addAll(SHELL);
    // The bundle's hashed files, as index.html names them (scripts, styles, preloads).
    await cache.addAll([...assetsOf(await (await cache.match("/")).text())]);
    await self.skipWaiting();
  })());
});

self.addEventListener("activate", (event) => {
  event.waitUntil((async () => {
    for (const name of await caches.keys()) if (name !== CACHE) await caches.delete(name);
    await self.clients.claim();
  })());
});

self.addEventListener("fetch", (event) => {
  const url = new URL(event.request.url);
  if (event.request.method !== "GET" || url.origin !== self.location.origin) return;
  if (url.pathname.startsWith("/__/") && url.pathname !== "/__/firebase/init.json") return;
  // Hashed file names never change content: the cache first. Anything else: the network first,
  // so that a new deploy shows at once, and the cached copy when offline or slow.
  event.respondWith(url.pathname.startsWith("/assets/") ? cacheFirst(event.request) : networkFirst(event));
});

async function cacheFirst(request) {
  const cached = await caches.match(request);
  if (cached) return cached;
  const response = await fetch(request);
  if (response.ok) await (await caches.open(CACHE)).put(request, response.clone());
  return response;
}

/** The network's answer (kept in the cache), or the cached copy when the network fails or has
 * not answered within NETWORK_TIMEOUT_MS; without a cached copy, the network's answer however late. */
async function networkFirst(event) {
  const { request } = event;
  const fromNetwork = fetch(request).then(async (response) => {
    if (!response.ok) return response;
    const cache = await caches.open(CACHE);
    if (request.mode !== "navigate") {
      await cache.put(request, response.clone());
      return response;
    }
    // A page is kept under its path alone: /?post=a offline is / with its own query. A new page
    // may name new hashed files: those no cached page names are an earlier deploy's, dropped
    // after the page is answered.
    await cache.put(new URL(request.url).pathname, response.clone());
    event.waitUntil(forgetUnnamedAssets(cache));
    return response;
  });
  // The cache write may outlive the answer (a timeout answered from the cache first).
  event.waitUntil(fromNetwork.catch(() => {}));
  let timer;
  const slow = new Promise((resolve) => { timer = setTimeout(resolve, NETWORK_TIMEOUT_MS); });
  try {
    const first = await Promise.race([fromNetwork, slow.then(() => null)]);
    if (first) return first;
  } catch {
    // Failed: the cached copy below, else the failure.
  } finally {
    clearTimeout(timer);
  }
  const cached = await caches.match(request, { ignoreSearch: request.mode === "navigate" });
  return cached ?? fromNetwork;
}

/** The bundle's hashed files a page names (scripts, styles, preloads). */
function assetsOf(html) {
  return new Set([...html.matchAll(/(?:src|href)="(\/assets\/[^"]+)"/g)].map((m) => m[1]));
}

async function forgetUnnamedAssets(cache) {
  const keys = await cache.keys();
  const named = new Set();
  for (const key of keys) {
    const response = await cache.match(key);
    if (response.headers.get("content-type")?.startsWith("text/html")) {
      for (const asset of assetsOf(await response.text())) named.add(asset);
    }
  }
  for (const key of keys) {
    const path = new URL(key.url).pathname;
    if (path.startsWith("/assets/") && !named.has(path)) await cache.delete(key);
  }
}
