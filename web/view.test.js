// Unit tests of how a finished turn's line reads in the console. Run with
// `node --test web/` (TestNodeUnits runs them from go test).
import assert from "node:assert/strict";
import { test } from "node:test";

import { denialWords, endDetail, omittedWords, planMark, toolState } from "./view.js";

test("endDetail: a cancel does not repeat the badge's word", () => {
  assert.deepEqual(endDetail({ stop_reason: "canceled", error: null, duration_ms: 2700 }), ["2.7 s"]);
});

test("endDetail: a turn the server stopped says so", () => {
  const error = { code: "server_stopped", message: "the server stopped during the turn; send the prompt again to go on" };
  assert.deepEqual(endDetail({ stop_reason: "canceled", error, duration_ms: 2700 }), ["stopped by the server", "2.7 s"]);
});

test("endDetail: a failure shows its message", () => {
  const error = { code: "turn_timeout", message: "the turn ran longer than 30m0s and was stopped" };
  assert.deepEqual(endDetail({ stop_reason: "error", error, duration_ms: 450 }), [
    "ended by an error",
    "the turn ran longer than 30m0s and was stopped",
    "450 ms",
  ]);
  assert.deepEqual(endDetail({ stop_reason: "max_tokens", duration_ms: 0 }), ["stopped at the token limit"]);
  assert.deepEqual(endDetail({ stop_reason: "end_turn" }), []);
});

test("toolState: a tool that ended after its approval was denied was denied, not failed", () => {
  assert.equal(toolState("failed", true), "denied");
  assert.equal(toolState("canceled", true), "denied");
  // Nothing was denied, or the tool ran all the same: as the agent says.
  assert.equal(toolState("failed", false), "failed");
  assert.equal(toolState("completed", true), "completed");
  assert.equal(toolState("pending", true), "pending");
});

test("denialWords: a success with denials reads as the CLI's summary does", () => {
  assert.equal(denialWords(1), "succeeded with a denial");
  assert.equal(denialWords(2), "succeeded with 2 denials");
});

test("omittedWords: what a snapshot left out of a long turn", () => {
  assert.equal(omittedWords(0, 0), "");
  assert.equal(omittedWords(1, 0), "1 earlier tool not shown");
  assert.equal(omittedWords(99900, 2), "99900 earlier tools and 2 earlier message parts not shown");
  assert.equal(omittedWords(0, 1), "1 earlier message part not shown");
});

test("planMark: to do, doing, done", () => {
  assert.equal(planMark("pending"), "○");
  assert.equal(planMark("in_progress"), "◐");
  assert.equal(planMark("completed"), "✓");
  assert.equal(planMark("something else"), "○");
});
