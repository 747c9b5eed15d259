// What `firebase deploy` works out from a project's files before it calls Google, run offline
// with the pinned firebase-tools' own modules (`firebase deploy --dry-run` needs a login and a
// real project, so tests/adopt cannot run it): firebase.json is loaded and its codebases
// validated; each codebase is discovered as a deploy discovers it (its main.py or index.js
// loaded in its own runtime, its .env files read for a real project, not the emulator's
// .env.local), its function ids prefixed, its parameters resolved without a terminal (a value
// missing in a clone fails here as in CI) and its endpoints validated; each Firestore database's
// rules file must exist and its index file pass firebase-tools' checks. Not covered: rules
// compilation (the Firestore emulator compiles them in the same test), and everything a deploy
// asks of Google (APIs enabled, the database, IAM).
//
// usage: node deploy_dry_run.cjs FIREBASE_TOOLS_DIR PROJECT_DIR PROJECT_ID
// prints {"functions": {codebase: {id: endpoint}}, "firestore": [{database, rules, indexes}]}
"use strict";
const fs = require("fs");
const path = require("path");

const [toolsDir, projectDir, projectId] = process.argv.slice(2);
const lib = (name) => require(path.join(toolsDir, "lib", name));
const { Config } = lib("config");
const projectConfig = lib("functions/projectConfig");
const runtimes = lib("deploy/functions/runtimes");
const functionsEnv = lib("functions/env");
const build = lib("deploy/functions/build");
const backend = lib("deploy/functions/backend");
const validate = lib("deploy/functions/validate");
const fsConfig = lib("firestore/fsConfig");
const { FirestoreApi } = lib("firestore/api");
const { loadCJSON } = lib("loadCJSON");
const winston = require(require.resolve("winston", { paths: [toolsDir] }));

// What the codebases' runtimes print when they fail to load (a Python traceback, say), on
// stderr as firebase deploy prints it; stdout is the result.
lib("logger").logger.add(new winston.transports.Console({
  level: "warn", stderrLevels: ["error", "warn"],
  format: winston.format.printf((info) => String(info.message)) }));

async function main() {
  const options = { cwd: projectDir, project: projectId, projectId, nonInteractive: true };
  const config = Config.load(options);
  options.config = config;
  const firebaseConfig = { projectId, storageBucket: `${projectId}.appspot.com` };
  const result = { functions: {}, firestore: [] };
  for (const codebase of projectConfig.normalizeAndValidate(config.src.functions)) {
    const sourceDir = config.path(codebase.source);
    const delegate = await runtimes.getRuntimeDelegate({
      projectId, sourceDir, projectDir: config.projectDir, runtime: codebase.runtime });
    await delegate.validate();
    await delegate.build();
    const userEnvs = functionsEnv.loadUserEnvs({
      functionsSource: sourceDir, projectId, projectDir: config.projectDir });
    const discovered = await delegate.discoverBuild({ firebase: firebaseConfig }, {
      ...userEnvs, ...functionsEnv.loadFirebaseEnvs(firebaseConfig, projectId),
      GOOGLE_CLOUD_QUOTA_PROJECT: projectId });
    build.applyEndpointPrefix(discovered, codebase.prefix || "");
    const { backend: wanted } = await build.resolveBackend({
      build: discovered, firebaseConfig, userEnvs, codebase: codebase.codebase,
      nonInteractive: true, isEmulator: false });
    validate.endpointsAreValid(wanted);
    result.functions[codebase.codebase] = Object.fromEntries(
      backend.allEndpoints(wanted).map((endpoint) => [endpoint.id, endpoint]));
  }
  const api = new FirestoreApi();
  for (const store of fsConfig.getFirestoreConfig(projectId, options) || []) {
    if (!fs.existsSync(config.path(store.rules))) {
      throw new Error(`${store.rules} (rules of ${store.database}) does not exist`);
    }
    const spec = api.upgradeOldSpec(loadCJSON(config.path(store.indexes)));
    api.validateSpec(spec);
    result.firestore.push({ database: store.database || "(default)", rules: store.rules,
                            indexes: spec.indexes.length + spec.fieldOverrides.length });
  }
  process.stdout.write(JSON.stringify(result));
}

main().then(() => process.exit(0), (error) => {
  process.stderr.write(`${error.message}\n`);
  process.exit(1);
});
