// @ts-check
// backend-reader.mjs reads a Sandbox's event stream from a Node backend
// with sparkles-events.js and the server token, as an application's
// backend would, against a real `sparkles serve` (SPARKLES_URL,
// SPARKLES_TOKEN). TestNodeBackendReader in internal/e2e runs it; it
// exits 0 and prints "ok" only when the stream was right:
//
//   - reader A follows a turn from since=0. Its first connection is cut
//     right after approval.requested; the backend approves; the reader
//     reconnects with Last-Event-ID once the turn has completed, so every
//     event after the cut must come from the replay of that cursor. Then a
//     second turn runs, live.
//   - the events A delivered are, id for id and byte for byte, the log as
//     the JSON pages give it, and the first turn is whole: turn.started,
//     the messages, the tools, the approval and its resolution, one
//     message.completed whose text is the text parts joined, turn.completed.
//   - reader B resumes from a cursor in the middle (a backend that kept
//     its last id across a restart) and delivers exactly the rest.
//   - reader C holds only the stream token, as a browser would, and sees
//     the snapshot of the same log.
//
// Any other outcome throws, and the process exits 1 with the reason.

import { SandboxEventStream } from "../sparkles-events.js";

/** @typedef {import("../sparkles-events.js").DurableEvent} DurableEvent */

const base = process.env.SPARKLES_URL ?? "";
const token = process.env.SPARKLES_TOKEN ?? "";
if (!base || !token) {
  throw new Error("set SPARKLES_URL and SPARKLES_TOKEN");
}

const deadline = AbortSignal.timeout(60_000);

/**
 * @param {string} method
 * @param {string} path
 * @param {unknown} [body]
 * @returns {Promise<any>}
 */
async function api(method, path, body) {
  /** @type {Record<string, string>} */
  const headers = { Authorization: `Bearer ${token}` };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
  }
  const resp = await fetch(base + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal: deadline });
  const text = await resp.text();
  if (!resp.ok) {
    throw new Error(`${method} ${path}: ${resp.status} ${text}`);
  }
  return JSON.parse(text);
}

/** @param {boolean} ok @param {string} what */
function check(ok, what) {
  if (!ok) {
    throw new Error(what);
  }
}

/** @param {() => Promise<boolean>} cond @param {string} what */
async function waitFor(cond, what) {
  while (!(await cond())) {
    if (deadline.aborted) {
      throw new Error("timed out waiting for " + what);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** The whole retained log, through the JSON pages. @param {string} id */
async function readLog(id) {
  /** @type {DurableEvent[]} */
  const out = [];
  let since = "0";
  for (;;) {
    const page = await api("GET", `/v1/sandboxes/${id}/events?since=${since}&limit=3`);
    out.push(...page.data);
    if (!page.has_more) {
      return out;
    }
    since = page.next_since;
  }
}

/**
 * A reader that resolves once it has delivered the event with id `last`
 * (or, with no `last`, once done(event) is true).
 * @param {object} o
 * @param {string} o.sandboxId
 * @param {string} o.token
 * @param {string} [o.since]
 * @param {(e: DurableEvent) => boolean} o.done
 * @param {(e: DurableEvent) => void} [o.onEvent]
 * @param {() => void} [o.onSnapshot]
 * @param {typeof fetch} [o.fetch]
 */
function follow(o) {
  /** @type {DurableEvent[]} */
  const events = [];
  /** @type {import("../sparkles-events.js").SnapshotInfo[]} */
  const snapshots = [];
  /** @type {SandboxEventStream} */
  let stream;
  const done = new Promise((resolve, reject) => {
    deadline.addEventListener("abort", () => reject(new Error(`reader of ${o.sandboxId}: timed out after ${events.length} events`)));
    stream = new SandboxEventStream({
      sandboxId: o.sandboxId,
      token: o.token,
      baseURL: base,
      since: o.since,
      minBackoff: 10,
      maxBackoff: 50,
      fetch: o.fetch,
      onSnapshot(_data, info) {
        snapshots.push(info);
        o.onSnapshot?.();
      },
      onEvent(ev) {
        events.push(ev);
        o.onEvent?.(ev);
        if (o.done(ev)) {
          resolve(undefined);
        }
      },
      onError: reject,
    });
    stream.start();
  });
  // stream is set: the Promise executor ran before this line.
  return { events, snapshots, done, close: () => stream.close() };
}

/** @param {DurableEvent[]} got @param {DurableEvent[]} want @param {string} who */
function sameEvents(got, want, who) {
  const ids = (/** @type {DurableEvent[]} */ evs) => evs.map((e) => e.id).join(",");
  check(ids(got) === ids(want), `${who} delivered ids [${ids(got)}]; the log has [${ids(want)}]`);
  for (let i = 0; i < got.length; i++) {
    check(JSON.stringify(got[i]) === JSON.stringify(want[i]), `${who}: event ${got[i].id} differs from the log:\n${JSON.stringify(got[i])}\n${JSON.stringify(want[i])}`);
  }
}

const sb = await api("POST", "/v1/sandboxes", { metadata: { from: "node-backend" } });

// Reader A: its first connection is cut after approval.requested; the
// reconnection waits until the turn has completed.
let turnID = "";
/** @type {string[]} */
const cursors = []; // Last-Event-ID of each stream connection
let connections = 0;
let turnDone = false;
/** @type {typeof fetch} */
const cuttingFetch = async (input, init) => {
  const url = String(input);
  if (!url.endsWith("/events/stream")) {
    return fetch(input, init);
  }
  const headers = /** @type {Record<string, string>} */ (init?.headers ?? {});
  connections++;
  if (connections > 1) {
    await waitFor(async () => turnDone, "the turn to complete");
  }
  cursors.push(headers["Last-Event-ID"] ?? "");
  const resp = await fetch(input, init);
  if (connections > 1 || !resp.body) {
    return resp;
  }
  // Pass the first connection's frames on until approval.requested, then
  // break it as a dropped connection would.
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  const encoder = new TextEncoder();
  let buf = "";
  let cut = false;
  const body = new ReadableStream({
    async pull(controller) {
      if (cut) {
        // Only now: an error discards what the reader has not read yet.
        reader.cancel().catch(() => {});
        controller.error(new Error("connection cut by the test"));
        return;
      }
      const { value, done } = await reader.read();
      if (done) {
        controller.close();
        return;
      }
      buf += decoder.decode(value, { stream: true });
      let end;
      while ((end = buf.indexOf("\n\n")) >= 0) {
        const frame = buf.slice(0, end + 2);
        buf = buf.slice(end + 2);
        controller.enqueue(encoder.encode(frame));
        if (frame.includes("\nevent: approval.requested\n")) {
          cut = true; // what else came with it is lost, as in a cut
          return;
        }
      }
    },
    cancel() {
      reader.cancel().catch(() => {});
    },
  });
  return new Response(body, { status: resp.status, headers: resp.headers });
};

// Once the resumed connection is up, a second turn starts: its events
// come live after whatever the cursor replays, so reader A ends at its
// turn.completed whether or not the server honoured the cursor, and the
// comparison with the log below tells which.
let turn2 = "";
const a = follow({
  sandboxId: sb.id,
  token,
  since: "0",
  fetch: cuttingFetch,
  done: (ev) => ev.type === "turn.completed" && turnID !== "" && ev.turn_id !== turnID,
  onSnapshot() {
    if (connections === 2 && turn2 === "") {
      turn2 = "starting";
      api("POST", `/v1/sandboxes/${sb.id}/turns`, { input: "hello again" }).then(
        (t) => (turn2 = t.id),
        (e) => {
          console.error(e);
          process.exit(1);
        },
      );
    }
  },
  onEvent(ev) {
    if (ev.type === "approval.requested") {
      api("POST", `/v1/sandboxes/${sb.id}/approvals/${ev.data.approval_id}`, { decision: "approve" }).catch((e) => {
        console.error(e);
        process.exit(1);
      });
    }
  },
});
const turn = await api("POST", `/v1/sandboxes/${sb.id}/turns`, { input: "please write notes.txt" });
turnID = turn.id;
await waitFor(async () => {
  const t = await api("GET", `/v1/sandboxes/${sb.id}/turns/${turnID}`);
  turnDone = t.status === "succeeded";
  check(!["failed", "canceled"].includes(t.status), `the turn ended ${t.status}`);
  return turnDone;
}, "the turn");
await a.done;
a.close();

const log = await readLog(sb.id);
sameEvents(a.events, log, "reader A");
const approval = log.find((e) => e.type === "approval.requested");
check(approval !== undefined, "the log has no approval.requested");
check(connections === 2, `reader A made ${connections} connections, want 2 (one cut, one resumed)`);
check(cursors[0] === "0" && cursors[1] === approval?.id, `reader A sent Last-Event-ID ${JSON.stringify(cursors)}, want ["0", "${approval?.id}"]`);
check(a.snapshots.length === 2 && a.snapshots.every((s) => s.resumed), "reader A: each connection starts with a snapshot, resumed from its cursor");

// The first turn as a backend reads it.
const turn1 = log.filter((e) => e.turn_id === turnID);
/** @type {string[]} */
const types = [...new Set(turn1.map((e) => e.type))];
for (const t of ["turn.started", "message.updated", "tool.updated", "approval.requested", "approval.resolved", "message.completed", "turn.completed"]) {
  check(types.includes(t), `the turn has no ${t}: ${types.join(" ")}`);
}
check(log.every((e) => e.sandbox_id === sb.id && (e.turn_id === turnID || e.turn_id === turn2)), "every event belongs to the sandbox and one of its turns");
for (let i = 1; i < log.length; i++) {
  check(BigInt(log[i].id) > BigInt(log[i - 1].id), `ids go ${log[i - 1].id} then ${log[i].id}`);
}
const completed = turn1.filter((e) => e.type === "message.completed");
check(completed.length === 1, `${completed.length} message.completed events in the turn, want 1`);
const end1 = turn1[turn1.length - 1];
check(end1.type === "turn.completed" && end1.data.status === "succeeded", `the turn ends with ${end1.type}`);
const last = log[log.length - 1];
check(last.type === "turn.completed" && last.turn_id === turn2, `the log ends with ${last.type} of ${last.turn_id}, not the second turn's`);
const resolved = turn1.find((e) => e.type === "approval.resolved");
check(resolved?.type === "approval.resolved" && resolved.data.decision === "approved" && resolved.data.reason === "user", "the approval was resolved approved by the user");
/** @type {Map<string, import("../sparkles-events.js").MessageUpdatedData>} */
const parts = new Map();
for (const e of turn1) {
  if (e.type === "message.updated") {
    parts.set(e.data.part_id, e.data);
  }
}
const msg = completed[0];
if (msg.type === "message.completed") {
  const text = msg.data.parts.filter((p) => p.kind === "text").map((p) => p.text).join("\n\n");
  check(msg.data.text !== "" && msg.data.text === text, `message.completed text ${JSON.stringify(msg.data.text)} is not its text parts joined`);
  for (const p of msg.data.parts) {
    check(parts.get(p.part_id)?.text === p.text, `part ${p.part_id}: the last message.updated differs from message.completed`);
  }
}

// Reader B: a backend that kept a cursor resumes from it.
const cursor = log[2].id;
const b = follow({ sandboxId: sb.id, token, since: cursor, done: (ev) => ev.id === last.id });
await b.done;
b.close();
sameEvents(b.events, log.filter((e) => BigInt(e.id) > BigInt(cursor)), `reader B (since ${cursor})`);

// Reader C: the stream token alone, as the browser gets it.
/** @type {import("../sparkles-events.js").SnapshotData} */
const snap = await new Promise((resolve, reject) => {
  const c = new SandboxEventStream({
    sandboxId: sb.id,
    token: sb.stream_token,
    baseURL: base,
    onSnapshot(data) {
      c.close();
      resolve(data);
    },
    onError: reject,
  }).start();
  deadline.addEventListener("abort", () => reject(new Error("reader C: no snapshot")));
});
check(snap.last_event_id === last.id && snap.sandbox.id === sb.id, `reader C's snapshot is at ${snap.last_event_id}, want ${last.id}`);

console.log(`ok: ${log.length} events, resumed at ${cursors[1]} and at ${cursor}`);
process.exit(0);
