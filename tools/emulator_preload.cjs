// Preloaded into firebase-tools by tools/stack.py (NODE_OPTIONS=--require): two fixes for the
// Emulator Suite under load, each of which failed fresh-clone test runs (docs/development.md).
const http = require("http");

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
// 60 s, unhandled, when one runs longer (the rollup's invocations run for a minute): Node then
// exits, and every emulator with it.
process.on("unhandledRejection", (reason) => {
  console.error("unhandled rejection in firebase-tools (the emulators keep running):", reason);
});
