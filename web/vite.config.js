// Bundles the web client (web/index.html + web/src) into web/dist, which the Hosting emulator
// serves. Everything, the Firebase SDK included, comes from node_modules: no CDN at runtime.
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

export default defineConfig({
  root: fileURLToPath(new URL(".", import.meta.url)),
  build: {
    outDir: "dist",
    emptyOutDir: true,
    // One page, one bundle; the Firebase SDK alone is ~600 kB before gzip.
    chunkSizeWarningLimit: 1500,
  },
  logLevel: "warn",
});
