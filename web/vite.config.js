// Bundles the web client (web/index.html, web/ops.html + web/src) into web/dist. Everything, the
// Firebase SDK and the chart library included, comes from node_modules: no CDN at runtime.
//
// Two modes:
// - `vite build --mode emulator` (`make web`): the bundle the Hosting emulator serves. It connects
//   to the local emulators, whose hosts and ports (firebase.json) are read here, at build time
//   (`make web` again after changing them), and starts no App Check (the emulators check none).
// - `vite build` (production, what firebase.json's hosting predeploy runs): no emulator address in
//   the bundle at all; the Firebase config comes from Hosting's /__/firebase/init.json at run time
//   (or from VITE_FIREBASE_CONFIG at build time), App Check from VITE_RECAPTCHA_SITE_KEY.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

const readJson = (name) => JSON.parse(readFileSync(new URL(`../${name}`, import.meta.url), "utf8"));

/** The emulators the local bundle connects to, from firebase.json. */
function emulators() {
  const { emulators: all } = readJson("firebase.json");
  return Object.fromEntries(
    ["auth", "firestore", "functions"].map((name) => [name, { host: all[name].host, port: all[name].port }]),
  );
}

export default defineConfig(({ mode }) => ({
  root: fileURLToPath(new URL(".", import.meta.url)),
  // backend.js reads __EMULATORS__: the emulators' addresses locally, null in production (and
  // the code that would use them is then dropped from the bundle).
  define: { __EMULATORS__: JSON.stringify(mode === "emulator" ? emulators() : null) },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    // The Firebase SDK alone is ~600 kB before gzip.
    chunkSizeWarningLimit: 1500,
    rollupOptions: {
      input: {
        app: fileURLToPath(new URL("index.html", import.meta.url)),
        ops: fileURLToPath(new URL("ops.html", import.meta.url)),
      },
    },
  },
  logLevel: "warn",
}));
