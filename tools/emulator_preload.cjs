// Preloaded into firebase-tools by tools/stack.py (NODE_OPTIONS=--require): two fixes for the
// Emulator Suite under load, each of which failed fresh-clone test runs, and the Cloud Tasks
// emulator made to schedule as Cloud Tasks does (docs/development.md).
const http = require("http");
const path = require("path");

// 1. No keep-alive on the connections the emulators open, above all the Functions emulator's to
// its Python workers. Node 20's global HTTP agent keeps idle connections for 5 s;
// functions-framework's gunicorn closes them after 2 s. A request the emulator sends on a
// connection gunicorn is just closing is reset ("socket hang up", ECONNRESET): the emulator
// answers HTTP 500 and kills the worker. The window is as long as Node's event loop lags behind
// the close, so it opens under load (16 workers starting at once on 2 cores). A new loopback
// connection per request costs a fraction of a millisecond.
http.globalAgent = new http.Agent({ keepAlive: false });

// 2. A rejected promise nobody handles is logged, not fatal. The Emulator Hub's
// "disableBackgroundTriggers" waits for every running function to finish and rejects after
// 60 s, unhandled, when one runs longer (a rollup task waiting out a lease, a slow backfill):
// Node then exits, and every emulator with it.
process.on("unhandledRejection", (reason) => {
  console.error("unhandled rejection in firebase-tools (the emulators keep running):", reason);
});

// 3. Cloud Tasks' schedule. The Cloud Tasks emulator dispatches a task as soon as it is enqueued,
// whatever its `scheduleTime`, and looks at an idle queue once a second. Cloud Tasks dispatches a
// task at its schedule time, within milliseconds when the queue has room. The rollup's tick for a
// second is scheduled for that second's end, so that it starts after every write of that second
// (functions/counting/writepath/waking.py): here a task waits for its time before it joins the queue (its
// name is taken at once, so a duplicate is refused as before), and an idle queue is looked at
// every 20 ms.
try {
  const emulator = path.join(__dirname, "..", "node_modules/firebase-tools/lib/emulator");
  const { TaskQueue } = require(path.join(emulator, "taskQueue.js"));
  const { TaskQueueController } = require(path.join(emulator, "tasksEmulator.js"));
  const enqueueNow = TaskQueue.prototype.enqueue;
  TaskQueue.prototype.enqueue = function (task) {
    const wait = task.scheduleTime ? Date.parse(task.scheduleTime) - Date.now() : 0;
    if (!(wait > 0)) {
      return enqueueNow.call(this, task);
    }
    if (this.queuedIds.has(task.name)) {
      throw new Error(`A task has already been queued with id ${task.name}`);
    }
    this.queuedIds.add(task.name);
    setTimeout(() => {
      this.queuedIds.delete(task.name);
      enqueueNow.call(this, task);
    }, wait);
  };
  TaskQueueController.LISTEN_TIMEOUT = 20;
} catch (error) {
  console.error("could not make the Cloud Tasks emulator honour schedule times:", error);
}
