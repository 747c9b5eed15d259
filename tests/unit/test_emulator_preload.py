"""The preload that makes the Cloud Tasks emulator schedule as Cloud Tasks does
(tools/emulator_preload.cjs): a task waits for its `scheduleTime` before it joins the queue, its
name is taken at once, and an idle queue is looked at every few milliseconds. Run in Node on the
pinned firebase-tools' own TaskQueue."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
require("./tools/emulator_preload.cjs");
const emulator = "./node_modules/firebase-tools/lib/emulator";
const { TaskQueue } = require(`${emulator}/taskQueue.js`);
const { TaskQueueController } = require(`${emulator}/tasksEmulator.js`);
const queue = new TaskQueue("q", {
  rateLimits: { maxDispatchesPerSecond: 500, maxConcurrentDispatches: 1 },
  retryConfig: {}, defaultUri: "http://localhost/none",
});
const task = (name, inMs) => ({ name, httpRequest: { url: "", body: {} },
  ...(inMs === null ? {} : { scheduleTime: new Date(Date.now() + inMs).toISOString() }) });
const seen = { listenMs: TaskQueueController.LISTEN_TIMEOUT };
queue.enqueue(task("later", 300));
queue.enqueue(task("now", null));
seen.atOnce = queue.queue.getAll().map((t) => t.task.name);
try { queue.enqueue(task("later", 300)); seen.duplicate = "accepted"; }
catch (error) { seen.duplicate = "refused"; }
setTimeout(() => { seen.early = queue.queue.size(); }, 200);
setTimeout(() => {
  seen.due = queue.queue.getAll().map((t) => t.task.name);
  console.log(JSON.stringify(seen));
}, 450);
"""


def test_scheduled_tasks_wait_for_their_time_and_names_stay_taken() -> None:
    out = subprocess.run(["node", "-e", PROBE], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen == {"listenMs": 20, "atOnce": ["now"], "duplicate": "refused", "early": 1,
                    "due": ["now", "later"]}
