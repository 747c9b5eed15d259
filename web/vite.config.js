// Bundles the web client (web/index.html + web/src) into web/dist, which the Hosting emulator
// serves. Everything, the Firebase SDK included, comes from node_modules: no CDN at runtime.
// The emulators' hosts and ports (firebase.json) and the project id (.firebaserc) are read here,
// at build time, so the page talks to whatever the stack is started with (`make web` again after
// changing them).
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

const readJson = (name) => JSON.parse(readFileSync(new URL(`../${name}`, import.meta.url), "utf8"));
const { emulators } = readJson("firebase.json");
const STACK = {
  project: readJson(".firebaserc").projects.default,
  emulators: Object.fromEntries(
    ["auth", "firestore", "functions"].map((name) => [
      name,
      { host: emulators[name].host, port: emulators[name].port },
    ]),
  ),
};

export default defineConfig({
  root: fileURLToPath(new URL(".", import.meta.url)),
  // backend.js reads it as __STACK__ (replaced by this JSON in the bundle).
  define: { __STACK__: JSON.stringify(STACK) },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    // One page, one bundle; the Firebase SDK alone is ~600 kB before gzip.
    chunkSizeWarningLimit: 1500,
  },
  logLevel: "warn",
});
