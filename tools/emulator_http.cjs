// Preloaded into firebase-tools by tools/stack.py (NODE_OPTIONS=--require): no keep-alive on the
// connections the emulators open, above all the Functions emulator's to its Python workers.
//
// Node 20's global HTTP agent keeps idle connections for 5 s; functions-framework's gunicorn
// closes them after 2 s. A request the emulator sends on a connection gunicorn is just closing
// is reset ("socket hang up", ECONNRESET): the emulator answers HTTP 500 and kills the worker.
// The window is as long as Node's event loop lags behind the close, so it opens under load: 16
// workers starting at once on 2 cores failed a test in most fresh clones. A new loopback
// connection per request costs a fraction of a millisecond.
const http = require("http");

http.globalAgent = new http.Agent({ keepAlive: false });
