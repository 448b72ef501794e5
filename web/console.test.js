// Unit tests of the console's pure parts: reading a turn back from the end
// of a log, the words of approval outcomes, statuses and times. Run with
// `node --test web/` (TestNodeUnits runs them from go test).
import assert from "node:assert/strict";
import { test } from "node:test";

import { lastingText, outcome } from "./approval.js";
import { ago, sandboxState, statusWords } from "./dom.js";
import { firstTurnStart, turnEvents } from "./history.js";

// fakeLog answers api.events(id, since, limit) from a list of events, as
// the server pages a log: the events with ids above since, at most limit,
// below pruned_through none (a 410 there, as the server answers).
function fakeLog(events, { prunedThrough = 0 } = {}) {
  const calls = [];
  return {
    calls,
    async events(_id, since, limit) {
      calls.push(String(since));
      if (BigInt(since) < BigInt(prunedThrough) && String(since) !== "0") {
        throw Object.assign(new Error("cursor pruned"), { status: 410, type: "cursor_pruned" });
      }
      const after = events.filter((e) => BigInt(e.id) > BigInt(since));
      const data = after.slice(0, limit);
      return { data, has_more: after.length > limit, next_since: data.at(-1)?.id ?? String(since) };
    },
  };
}

// turnLog makes a log: for each [turnID, n], a turn.started and n - 1
// message.updated events, ids counting from first.
function turnLog(turns, first = 1) {
  const out = [];
  let id = first;
  for (const [turn, n] of turns) {
    for (let i = 0; i < n; i++) {
      out.push({ id: String(id++), type: i === 0 ? "turn.started" : "message.updated", turn_id: turn, data: { input: [{ type: "text", text: turn }] } });
    }
  }
  return out;
}

test("turnEvents: a short last turn costs one page", async () => {
  const log = turnLog([["turn_a", 40], ["turn_b", 12]]);
  const api = fakeLog(log);
  const got = await turnEvents(api, "c_1", "turn_b", { last: log.at(-1).id });
  assert.equal(got.length, 12);
  assert.equal(got[0].type, "turn.started");
  assert.deepEqual(api.calls, [String(52 - 256 > 0 ? 52 - 256 : 0)]);
});

test("turnEvents: a long turn is read back in growing windows, each once", async () => {
  const log = turnLog([["turn_a", 30], ["turn_b", 3000]]);
  const api = fakeLog(log);
  const got = await turnEvents(api, "c_1", "turn_b", { last: log.at(-1).id });
  assert.equal(got.length, 3000);
  assert.deepEqual(
    got.map((e) => Number(e.id)),
    log.filter((e) => e.turn_id === "turn_b").map((e) => Number(e.id)),
  );
  // Windows of 256, 1024, 4096 ids below 3030: the third reaches the start.
  assert.equal(api.calls[0], String(3030 - 256));
  assert.ok(api.calls.length <= 10, `${api.calls.length} pages`);
});

test("turnEvents: it stops where retention stopped, without the turn's start", async () => {
  const log = turnLog([["turn_b", 2000]]).slice(1500); // the first 1500 pruned
  const api = fakeLog(log, { prunedThrough: 1500 });
  const got = await turnEvents(api, "c_1", "turn_b", { last: "2000", floor: "1500" });
  assert.equal(got.length, 500);
  assert.ok(api.calls.every((since) => BigInt(since) >= 1500n), `read below the floor: ${api.calls}`);
});

test("turnEvents: the events after last belong to the stream", async () => {
  const log = turnLog([["turn_b", 20]]);
  const got = await turnEvents(fakeLog(log), "c_1", "turn_b", { last: "15" });
  assert.equal(got.at(-1).id, "15");
});

test("firstTurnStart", async () => {
  const errorFirst = [{ id: "1", type: "sandbox.error", turn_id: null, data: {} }, ...turnLog([["turn_a", 3]], 2)];
  const { started, turns } = await firstTurnStart(fakeLog(errorFirst), "c_1");
  assert.equal(started.turn_id, "turn_a");
  assert.equal(turns, true);

  const pruned = await firstTurnStart(fakeLog(turnLog([["turn_a", 30]]).slice(5)), "c_1");
  assert.equal(pruned.started, null);
  assert.equal(pruned.turns, true);

  const none = await firstTurnStart(fakeLog([]), "c_1");
  assert.deepEqual(none, { started: null, turns: false });
});

test("outcome", () => {
  const request = {
    options: [
      { option_id: "opt_1", kind: "allow_always" },
      { option_id: "opt_2", kind: "allow_once" },
      { option_id: "opt_3", kind: "reject_once" },
      { option_id: "opt_4", kind: "reject_always" },
    ],
  };
  for (const [d, label] of [
    [{ decision: "approved", option_id: "opt_2", reason: "user" }, "Allowed once"],
    [{ decision: "approved", option_id: "opt_1", reason: "user" }, "Always allowed"],
    [{ decision: "approved", option_id: "opt_9", reason: "user" }, "Allowed"],
    [{ decision: "denied", option_id: "opt_3", reason: "user" }, "Denied"],
    [{ decision: "denied", option_id: "opt_4", reason: "user" }, "Always denied"],
    [{ decision: "canceled", option_id: "", reason: "timeout" }, "Timed out"],
    [{ decision: "canceled", option_id: "", reason: "turn_canceled" }, "Canceled"],
    [{ decision: "failed", option_id: "", reason: "agent_exited" }, "Failed"],
  ]) {
    assert.equal(outcome(d, request).label, label, JSON.stringify(d));
  }
  // Without the request (retention removed it) the kind is unknown.
  assert.equal(outcome({ decision: "approved", option_id: "opt_2" }, undefined).label, "Allowed");
  assert.equal(outcome({ decision: "canceled", reason: "agent_exited" }).why, "the agent exited");
});

test("lastingText says always once", () => {
  for (const [o, want] of [
    [{ kind: "allow_always", label: "Always allow writes" }, "Always allow writes"],
    [{ kind: "allow_always", label: "Always Allow" }, "Always allow"],
    [{ kind: "allow_always", label: "Allow for this session" }, "Always allow: Allow for this session"],
    [{ kind: "allow_always", label: "Always allowance" }, "Always allow: Always allowance"],
    [{ kind: "allow_always", label: "Always deny" }, "Always allow: Always deny"],
    [{ kind: "reject_always", label: "always deny: rm -rf" }, "Always deny: rm -rf"],
    [{ kind: "reject_always", label: "" }, "Always deny"],
  ]) {
    assert.equal(lastingText(o), want, JSON.stringify(o));
  }
});

test("statusWords: stopped is idle", () => {
  assert.deepEqual(statusWords("stopped"), { label: "idle", long: "idle — starts with the next prompt" });
  assert.deepEqual(statusWords("ready"), { label: "ready", long: "ready" });
});

test("ago", () => {
  const now = Date.parse("2026-08-06T12:00:00.000Z");
  for (const [t, want] of [
    ["2026-08-06T11:59:30.000Z", "just now"],
    ["2026-08-06T12:00:05.000Z", "just now"], // a clock a little ahead
    ["2026-08-06T11:55:00.000Z", "5 min ago"],
    ["2026-08-06T09:00:00.000Z", "3 h ago"],
    ["2026-08-05T10:00:00.000Z", "yesterday"],
    ["2026-08-01T12:00:00.000Z", "5 days ago"],
  ]) {
    assert.equal(ago(t, now), want, t);
  }
  assert.equal(ago("not a time", now), "");
});

test("sandboxState: one state for the header and the list row", () => {
  const ready = { status: "ready", current_turn: null };
  const running = { status: "ready", current_turn: { id: "t_1", status: "running" } };
  assert.deepEqual(sandboxState(ready), { key: "ready", label: "ready", long: "ready" });
  // A running turn, not the agent's own status: both places say running.
  assert.equal(sandboxState(running).label, "running");
  assert.equal(sandboxState(running).key, "running");
  assert.equal(sandboxState({ status: "ready", current_turn: { status: "queued" } }).label, "queued");
  // An approval that waits says so first.
  assert.deepEqual(sandboxState(running, 1), { key: "pending", label: "waiting", long: "running — waiting for your approval" });
  assert.equal(sandboxState(running, 2).long, "running — 2 approvals wait for you");
  // A finished turn leaves the sandbox's status, in the page's words.
  assert.equal(sandboxState({ status: "stopped", current_turn: { status: "succeeded" } }).label, "idle");
  assert.equal(sandboxState({ status: "deleted", current_turn: { status: "running" } }, 1).label, "deleted");
  assert.equal(sandboxState(undefined).key, "unknown");
});
