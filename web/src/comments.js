// A post's comments: the live count the collection counter comments:{post} keeps (a Firestore
// trigger counts each comment document, the rollup publishes counters/{id}), and a form to add a
// comment or delete one's own. The page writes comment documents directly; firestore.rules lets
// a signed-in user create and delete their own. Self-contained: it builds its card in
// <section id="comments">.
import { declaredCounterId } from "@counters/client";
import { onAuthStateChanged } from "firebase/auth";
import {
  addDoc,
  collection,
  deleteDoc,
  doc,
  onSnapshot,
  query,
  serverTimestamp,
  where,
} from "firebase/firestore";
import { clearErrors, describe, showError } from "./errors.js";

// Error banner topics.
const COUNT = "comment-count";
const WRITE = "comment";

/** The id of the counter of `post`'s comments, as the functions escape it. */
export const commentsCounter = (post) => declaredCounterId("comments", post);

function card(section) {
  section.innerHTML = `
    <h2>Comments</h2>
    <p class="muted">Comment documents, counted by a Firestore trigger: no callable involved.</p>
    <p>Comments on this post: <output id="comment-count" aria-label="comments">...</output></p>
    <form id="comment-form" class="row">
      <input id="comment-text" maxlength="1000" placeholder="Write a comment" autocomplete="off" />
      <button id="comment-add" type="submit" disabled>Comment</button>
      <button id="comment-delete" type="button" disabled>Delete my latest</button>
    </form>
    <p id="comment-detail" class="muted"></p>`;
  section.hidden = false;
}

export function startComments({ db, auth }, post) {
  const section = document.getElementById("comments");
  card(section);
  if (post.includes("/")) {
    // A document id cannot hold "/": there are no comments to show.
    showError(describe("Comments", new Error(`"${post}" is not a post id`)), COUNT);
    return;
  }
  const output = document.getElementById("comment-count");
  const form = document.getElementById("comment-form");
  const text = document.getElementById("comment-text");
  const add = document.getElementById("comment-add");
  const remove = document.getElementById("comment-delete");
  const detail = document.getElementById("comment-detail");
  const comments = collection(db, "posts", post, "comments");
  let mine = []; // this user's comment ids, newest last
  let stopMine = () => {};

  commentsCounter(post)
    .then((counter) =>
      onSnapshot(
        doc(db, "counters", counter),
        (snap) => {
          clearErrors(COUNT);
          // The trigger creates the counter with the post's first comment.
          output.textContent = snap.exists() ? String(snap.data().count ?? 0) : "0";
          output.dataset.counter = counter;
        },
        (error) => showError(describe(`Listening to counters/${counter}`, error), COUNT),
      ),
    )
    .catch((error) => showError(describe("The comments counter", error), COUNT));

  onAuthStateChanged(auth, (user) => {
    stopMine();
    add.disabled = !user;
    if (!user) {
      mine = [];
      remove.disabled = true;
      detail.textContent = "";
      return;
    }
    stopMine = onSnapshot(
      query(comments, where("author", "==", user.uid)),
      (snap) => {
        const when = (d) => d.get("created_at")?.toMillis() ?? Number.MAX_SAFE_INTEGER;
        mine = snap.docs.sort((a, b) => when(a) - when(b)).map((d) => d.id);
        remove.disabled = mine.length === 0;
        detail.textContent = `${mine.length} of them yours`;
      },
      (error) => showError(describe("Listening to your comments", error), WRITE),
    );
  });

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const user = auth.currentUser;
    if (!user) return;
    const body = text.value.trim() || "+1";
    text.value = "";
    addDoc(comments, { author: user.uid, text: body, created_at: serverTimestamp() })
      .then(() => clearErrors(WRITE))
      .catch((error) => showError(describe("Comment", error), WRITE));
  });

  remove.addEventListener("click", () => {
    const latest = mine.at(-1);
    if (!latest) return;
    deleteDoc(doc(comments, latest))
      .then(() => clearErrors(WRITE))
      .catch((error) => showError(describe("Deleting your comment", error), WRITE));
  });
}
