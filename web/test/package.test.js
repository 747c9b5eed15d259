// @counters/client as a host app gets it: installed from its tarball (make web-deps), resolved by
// name, it holds web/client's files and exports at run time the values its index.d.ts declares.
// A host's view of the types themselves is `tsc -p web/test/host` (make webunit).
import { readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { expect, test } from "vitest";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const SOURCE = join(ROOT, "web", "client");

/** Where a host's `import "@counters/client"` finds the package. */
function installed() {
  try {
    return dirname(createRequire(import.meta.url).resolve("@counters/client"));
  } catch (error) {
    throw new Error(`@counters/client is not installed (make web-deps installs it from its tarball): ${error.message}`);
  }
}

test("the installed package is web/client as packed: its module, types, manifest and README", () => {
  const where = installed();
  expect(where).toBe(join(ROOT, "node_modules", "@counters", "client"));
  const files = readdirSync(where).filter((name) => name !== ".installed").sort();
  expect(files).toEqual(["README.md", "counters-client.js", "index.d.ts", "package.json"]);
  for (const name of files) {
    expect(readFileSync(join(where, name), "utf8"), `${name} is not web/client's: make web-deps installs it again`)
      .toBe(readFileSync(join(SOURCE, name), "utf8"));
  }
});

test("the package exports the values its index.d.ts declares, and no others", async () => {
  const types = join(installed(), "index.d.ts");
  const program = ts.createProgram([types], { target: ts.ScriptTarget.ES2022, lib: ["lib.es2022.d.ts", "lib.dom.d.ts"] });
  const checker = program.getTypeChecker();
  const declared = checker.getExportsOfModule(checker.getSymbolAtLocation(program.getSourceFile(types)))
    .filter((symbol) => symbol.flags & ts.SymbolFlags.Value)
    .map((symbol) => [symbol.name, symbol.flags & ts.SymbolFlags.Variable ? "object" : "function"]);
  const exported = Object.entries(await import("@counters/client")).map(([name, value]) => [name, typeof value]);
  expect(exported.sort()).toEqual(declared.sort());
  expect(declared.map(([name]) => name).sort()).toEqual(["CountersClient", "TRANSIENT", "TapStore", "declaredCounterId",
    "extensionCounter", "firebaseTransport", "newRequestId", "rfc3339Micros", "timestampMicros", "withRetries",
    "withTimeout"]);
}, 60_000); // TypeScript reads lib.dom.d.ts: seconds on a busy machine
