// The tenant screen: a staff member (ID token claim `tenants: [tenant]`) takes numbers with
// `next_number` and watches sequences/{tenant}. It runs on a Firebase app of its own.
import { onAuthStateChanged, signInWithEmailAndPassword, signOut } from "firebase/auth";
import { doc, onSnapshot } from "firebase/firestore";
import { describe, showError } from "./errors.js";

export function startTenant({ auth, db, callable }, defaults) {
  const form = document.getElementById("staff-form");
  const email = document.getElementById("staff-email");
  const password = document.getElementById("staff-password");
  const tenantInput = document.getElementById("tenant-id");
  const panel = document.getElementById("staff-panel");
  const who = document.getElementById("staff-who");
  const take = document.getElementById("take-number");
  const mine = document.getElementById("my-number");
  const serving = document.getElementById("now-serving");
  const servingDetail = document.getElementById("serving-detail");
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
      showError(describe("Staff sign-in", error));
    } finally {
      button.disabled = false;
    }
  });

  document.getElementById("staff-sign-out").addEventListener("click", () => {
    signOut(auth).catch((error) => showError(describe("Sign-out", error)));
  });

  onAuthStateChanged(auth, async (user) => {
    unsubscribe();
    unsubscribe = () => {};
    form.hidden = Boolean(user);
    panel.hidden = !user;
    if (!user) return;
    tenant = tenantInput.value.trim();
    mine.textContent = "\u2014";
    serving.textContent = "\u2014";
    let claims = {};
    try {
      claims = (await user.getIdTokenResult()).claims;
    } catch (error) {
      showError(describe("Reading your ID token", error));
    }
    const member = claims.admin === true || (Array.isArray(claims.tenants) && claims.tenants.includes(tenant));
    who.textContent = `Staff ${user.email ?? user.uid} at ${tenant}` + (member ? "" : " (no tenants claim for it)");
    if (!member) {
      showError(`${user.email ?? user.uid} is not staff of "${tenant}": the account's ID token has no tenants claim listing it (README: "Staff accounts").`);
    }
    unsubscribe = onSnapshot(
      doc(db, "sequences", tenant),
      (snap) => {
        if (!snap.exists()) {
          serving.textContent = "\u2014";
          servingDetail.textContent = `Tenant "${tenant}" is not configured yet (an admin calls configure_sequence).`;
          return;
        }
        const data = snap.data();
        serving.textContent = String(data.last_number ?? 0);
        servingDetail.textContent = `business day ${data.business_day ?? "?"} (${data.timezone}, resets at ${data.reset_time})`;
      },
      (error) => {
        servingDetail.textContent = describe(`Listening to sequences/${tenant}`, error);
        showError(servingDetail.textContent);
      },
    );
  });

  take.addEventListener("click", async () => {
    take.disabled = true;
    try {
      const { data } = await nextNumber({ tenant });
      mine.textContent = String(data.number);
      mine.title = `business day ${data.business_day}`;
    } catch (error) {
      showError(describe(`Taking a number at ${tenant}`, error));
    } finally {
      take.disabled = false;
    }
  });
}
