// The tenant screen: a staff member (ID token claim `tenants: [tenant]`) takes numbers with
// `next_number` and watches sequences/{tenant}, whose last_number is the last number issued by
// any till (not the one being served: nothing records that). It runs on a Firebase app of its own.
import { onAuthStateChanged, signInWithEmailAndPassword, signOut } from "firebase/auth";
import { doc, onSnapshot } from "firebase/firestore";
import { clearErrors, describe, showError } from "./errors.js";

// Error banner topics: signing in and the tenant's document; taking a number.
const STAFF = "staff";
const TAKE = "take-number";

export function startTenant({ auth, db, callable }, defaults) {
  const form = document.getElementById("staff-form");
  const email = document.getElementById("staff-email");
  const password = document.getElementById("staff-password");
  const tenantInput = document.getElementById("tenant-id");
  const panel = document.getElementById("staff-panel");
  const who = document.getElementById("staff-who");
  const take = document.getElementById("take-number");
  const mine = document.getElementById("my-number");
  const issued = document.getElementById("last-issued");
  const issuedDetail = document.getElementById("issued-detail");
  const nextNumber = callable("next_number");

  email.value = defaults.email;
  password.value = defaults.password;
  tenantInput.value = defaults.tenant;
  let unsubscribe = () => {};
  let tenant = "";

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const button = document.getElementById("staff-sign-in");
    button.disabled = true;
    try {
      await signInWithEmailAndPassword(auth, email.value.trim(), password.value);
    } catch (error) {
      showError(describe("Staff sign-in", error), STAFF);
    } finally {
      button.disabled = false;
    }
  });

  document.getElementById("staff-sign-out").addEventListener("click", () => {
    signOut(auth).catch((error) => showError(describe("Sign-out", error), STAFF));
  });

  onAuthStateChanged(auth, async (user) => {
    unsubscribe();
    unsubscribe = () => {};
    // Signing in or out starts over: earlier failures were about the previous account.
    clearErrors(STAFF, TAKE);
    form.hidden = Boolean(user);
    panel.hidden = !user;
    if (!user) return;
    tenant = tenantInput.value.trim();
    mine.textContent = "\u2014";
    issued.textContent = "\u2014";
    issuedDetail.textContent = "";
    let claims = {};
    try {
      claims = (await user.getIdTokenResult()).claims;
    } catch (error) {
      showError(describe("Reading your ID token", error), STAFF);
    }
    const member = claims.admin === true || (Array.isArray(claims.tenants) && claims.tenants.includes(tenant));
    const name = user.email ?? user.uid;
    take.disabled = !member;
    if (!member) {
      // The tenant's document and next_number would both refuse this account: say why once,
      // rather than once per refusal.
      who.textContent = `Signed in as ${name}, who is not staff at ${tenant}`;
      showError(`${name} is not staff of "${tenant}": staff accounts carry a "tenants" claim ` +
        `listing the tenant, which only an admin can give. Sign out and sign in with a staff ` +
        `account of "${tenant}", or ask an admin to add it to this one.`, STAFF);
      return;
    }
    who.textContent = `Staff ${name} at ${tenant}`;
    unsubscribe = onSnapshot(
      doc(db, "sequences", tenant),
      (snap) => {
        clearErrors(STAFF);
        if (!snap.exists()) {
          issued.textContent = "\u2014";
          issuedDetail.textContent = `Tenant "${tenant}" is not configured yet (an admin calls configure_sequence).`;
          return;
        }
        const data = snap.data();
        issued.textContent = String(data.last_number ?? 0);
        issuedDetail.textContent = `business day ${data.business_day ?? "?"} (${data.timezone}, resets at ${data.reset_time})`;
      },
      (error) => {
        issuedDetail.textContent = describe(`Listening to sequences/${tenant}`, error);
        showError(issuedDetail.textContent, STAFF);
      },
    );
  });

  take.addEventListener("click", async () => {
    take.disabled = true;
    try {
      const { data } = await nextNumber({ tenant });
      mine.textContent = String(data.number);
      mine.title = `business day ${data.business_day}`;
      clearErrors(TAKE);
    } catch (error) {
      showError(describe(`Taking a number at ${tenant}`, error), TAKE);
    } finally {
      take.disabled = false;
    }
  });
}
