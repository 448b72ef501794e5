// Unit tests of how a finished turn's line reads in the console. Run with
// `node --test web/` (TestNodeUnits runs them from go test).
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  configWords,
  denialWords,
  endDetail,
  omittedWords,
  outputWords,
  planMark,
  promptWords,
  toolState,
  usageWords,
} from "./view.js";

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

test("outputWords: how a command ended, and what of its output is left out", () => {
  assert.equal(outputWords({ truncated: false, exit_code: null }), "");
  assert.equal(outputWords({ truncated: false, exit_code: 0 }), "exit code 0");
  assert.equal(outputWords({ truncated: true, exit_code: 2 }), "earlier output not shown · exit code 2");
  assert.equal(outputWords({ truncated: true, exit_code: null }), "earlier output not shown");
});

test("usageWords: the tokens of a turn, else what its context holds, and its cost", () => {
  assert.equal(usageWords(null), "");
  assert.equal(usageWords({ input_tokens: 0, output_tokens: 0, total_tokens: 0 }), "");
  assert.equal(usageWords({ input_tokens: 0, output_tokens: 0, total_tokens: 0, context_tokens: 1 }), "1 token");
  assert.equal(
    usageWords({ input_tokens: 0, output_tokens: 0, total_tokens: 0, context_tokens: 53000, context_window: 200000, cost: { amount: 0.0123, currency: "USD" } }),
    "53,000 tokens · 0.0123 USD",
  );
  assert.equal(usageWords({ input_tokens: 3, output_tokens: 40, total_tokens: 1243, context_tokens: 9, cost: { amount: 12.5, currency: "EUR" } }), "1,243 tokens · 12.50 EUR");
});

test("configWords: the mode and the model by their names, else their ids", () => {
  assert.equal(configWords(undefined), "");
  assert.equal(configWords({ modes: [], models: [] }), "");
  const config = {
    mode: "plan",
    model: "sonnet",
    modes: [{ id: "default", name: "Default" }, { id: "plan", name: "Plan Mode" }],
    models: [{ id: "sonnet", name: "Claude Sonnet" }],
  };
  assert.equal(configWords(config), "mode Plan Mode · model Claude Sonnet");
  // Asked for before the agent announced its choices: the ids.
  assert.equal(configWords({ mode: "plan", modes: [], models: [] }), "mode plan");
  assert.equal(configWords({ model: "gpt-5", modes: [], models: [{ id: "o3", name: "o3" }] }), "model gpt-5");
});

test("promptWords: images by their size and files by their path follow the text", () => {
  assert.equal(promptWords([{ type: "text", text: "hello" }]), "hello");
  const input = [
    { type: "text", text: "look at these" },
    { type: "image", media_type: "image/png", bytes: 68 },
    { type: "image", media_type: "image/jpeg", bytes: 30720 },
    { type: "file", path: "docs/notes.txt" },
  ];
  assert.equal(promptWords(input), "look at these\nimage (1 KB)\nimage (30 KB)\nfile docs/notes.txt");
  assert.equal(promptWords([{ type: "file", path: "a.txt" }]), "file a.txt");
  assert.equal(promptWords(undefined), "");
});
