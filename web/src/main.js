// The demo page: a post with a like button, the trending panel and a tenant's ticket screen.
// Query parameters pick other documents: ?post=<counter>&tenant=<tenant>.
import { onAuthStateChanged, signInAnonymously } from "firebase/auth";
import { connect } from "./backend.js";
import { clearErrors, describe, reportUncaught, showError } from "./errors.js";
import { startPost } from "./post.js";
import { startTenant } from "./tenant.js";
import { startTrends } from "./trends.js";

// What `make dev` seeds (tools/demo.py); the demo staff account only exists in the emulator.
const DEMO = {
  post: "demo-post",
  tenant: "demo-diner",
  email: "staff@demo-diner.test",
  password: "demo-password",
};

reportUncaught();
const params = new URLSearchParams(location.search);
const visitor = connect();
const staff = connect("staff");

const who = document.getElementById("who");
// The error banner topic of the anonymous sign-in.
const VISITOR = "visitor";
onAuthStateChanged(visitor.auth, (user) => {
  if (user) clearErrors(VISITOR);
  who.textContent = user ? `Signed in anonymously as ${user.uid}` : "Signed out";
  who.dataset.uid = user ? user.uid : "";
});
signInAnonymously(visitor.auth).catch((error) => {
  who.textContent = "Not signed in";
  showError(describe("Anonymous sign-in", error), VISITOR);
});

startPost(visitor, params.get("post") || DEMO.post);
startTrends(visitor);
startTenant(staff, {
  tenant: params.get("tenant") || DEMO.tenant,
  email: params.get("tenant") ? "" : DEMO.email,
  password: params.get("tenant") ? "" : DEMO.password,
});
