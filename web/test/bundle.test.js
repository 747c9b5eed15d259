// What a deploy ships: the production bundle names no local address (the emulators' hosts and
// ports, localhost), while the emulator bundle does (so that this test can see one).
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "vite";
import { afterAll, expect, test } from "vitest";

const CONFIG = fileURLToPath(new URL("../vite.config.js", import.meta.url));
const { emulators } = JSON.parse(readFileSync(new URL("../../firebase.json", import.meta.url), "utf8"));
const out = mkdtempSync(join(tmpdir(), "bundle-"));
afterAll(() => rmSync(out, { recursive: true, force: true }));

/** Every address of the local stack a bundle could name. */
function localAddresses(text) {
  const found = new Set();
  for (const [name, { host, port }] of Object.entries(emulators)) {
    if (!port) continue;
    for (const pattern of [new RegExp(`\\b${port}\\b`), new RegExp(`${host.replace(/\./g, "\\.")}`)]) {
      if (pattern.test(text)) found.add(`${name} (${pattern.source})`);
    }
  }
  if (/127\.0\.0\.1|\[::1\]|0\.0\.0\.0|localhost:\d/.test(text)) found.add("a loopback address");
  return [...found];
}

async function bundle(mode) {
  const dir = join(out, mode);
  await build({ configFile: CONFIG, mode, logLevel: "silent", build: { outDir: dir, emptyOutDir: true } });
  return readdirSync(dir, { recursive: true })
    .filter((name) => /\.(js|html|json|webmanifest)$/.test(name))
    .map((name) => readFileSync(join(dir, name), "utf8"))
    .join("\n");
}

test("the production bundle names no emulator or local address, nor the demo accounts", async () => {
  const text = await bundle("production");
  expect(localAddresses(text)).toEqual([]);
  expect(text).not.toMatch(/demo-password|@demo-diner\.test|admin@demo\.test/);
}, 120_000);

test("the emulator bundle names the emulators", async () => {
  expect(localAddresses(await bundle("emulator"))).toEqual(
    expect.arrayContaining(["auth (\\b9099\\b)", "firestore (\\b8080\\b)", "functions (\\b5001\\b)"]));
}, 120_000);
