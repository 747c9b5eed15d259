// Prints an OAuth access token for Google's REST APIs, from the Firebase CLI's own credentials,
// as `firebase deploy` finds them: FIREBASE_TOKEN (`firebase login:ci`), else the account
// `firebase login` stored (this directory's `firebase login:use` one first), else Application
// Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, `gcloud auth application-default login`).
// tools/deploy.py calls the IAM APIs with it. It uses firebase-tools' modules, so it follows the
// version package.json pins; the token goes to stdout only.
const path = require("path");

const lib = path.join(__dirname, "..", "node_modules", "firebase-tools", "lib");
const auth = require(path.join(lib, "auth"));
const { requireAuth } = require(path.join(lib, "requireAuth"));
const apiv2 = require(path.join(lib, "apiv2"));

(async () => {
  const account = auth.selectAccount(undefined, path.join(__dirname, ".."));
  await requireAuth({ user: account?.user, tokens: account?.tokens });
  process.stdout.write(await apiv2.getAccessToken());
})().catch((err) => {
  console.error(err.message);
  process.exit(1);
});
