// view.js renders a sandbox's transcript: one section per turn with the
// prompt, the reasoning, the tool cards, a line per approval (waiting, or
// what became of it), the answer and how the turn ended; and the cards of
// the pending approvals, in a dock of their own that stays in view above the
// prompt box however far the transcript is scrolled. It is fed the
// snapshot and the durable events of the sandbox's stream, and renders the
// same view from either, so a reload mid-turn shows what was there before it.
// A finished turn says what it changed in the workspace (changes.js), and a
// revert of the workspace shows as a line of its own, where it happened.
//
// Everything the agent wrote (message text, tool titles, paths, option
// labels, error messages) goes into the page as textContent, never as HTML.
import { ApprovalCard, DecisionRecord } from "./approval.js";
import { revertedLine, TurnChanges } from "./changes.js";
import { h, inputText, insertSorted } from "./dom.js";

const partKey = (p) => `${p.message_id ?? ""}\u0000${String(p.index ?? 0).padStart(8, "0")}\u0000${p.part_id}`;

function duration(ms) {
  if (ms === undefined || ms === null) {
    return "";
  }
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`;
}

const STOP_REASONS = {
  end_turn: "",
  max_tokens: "stopped at the token limit",
  max_turn_requests: "stopped at the request limit",
  refusal: "the agent refused",
  // The badge says canceled already.
  canceled: "",
  error: "ended by an error",
};

// ERROR_WORDS replace the message of an error whose code says it all.
const ERROR_WORDS = {
  server_stopped: "stopped by the server",
};

// endDetail is the line under a finished turn: how it stopped, why, and how
// long it took. A turn the server canceled by stopping says so, so that it
// does not read as a cancel of the user's own.
export function endDetail({ stop_reason, error, duration_ms } = {}) {
  const bits = [];
  if (stop_reason && STOP_REASONS[stop_reason] !== "") {
    bits.push(STOP_REASONS[stop_reason] ?? stop_reason.replaceAll("_", " "));
  }
  const why = ERROR_WORDS[error?.code] ?? error?.message;
  if (why) {
    bits.push(why);
  }
  if (duration_ms) {
    bits.push(duration(duration_ms));
  }
  return bits;
}

// denialWords is how a turn that succeeded with denials says so, as the
// CLI's exit status 3 counts them: requests the user denied.
export const denialWords = (n) => (n === 1 ? "succeeded with a denial" : `succeeded with ${n} denials`);

// usageWords is what a turn's usage says under it ("" when nothing): its
// tokens (the answer's total, else what its context holds, while it runs)
// and its cost.
export function usageWords(usage) {
  const say = [];
  const tokens = usage?.total_tokens || usage?.context_tokens || 0;
  if (tokens > 0) {
    say.push(`${tokens.toLocaleString("en-US")} ${tokens === 1 ? "token" : "tokens"}`);
  }
  const cost = usage?.cost;
  if (typeof cost?.amount === "number" && cost.currency) {
    say.push(`${cost.amount.toFixed(cost.amount < 1 ? 4 : 2)} ${cost.currency}`);
  }
  return say.join(" · ");
}

// configWords is what the sandbox header says of its agent's config (""
// when it has none): the mode and the model by the names the agent gave
// them, else by their ids.
export function configWords(config) {
  const name = (choices, id) => choices?.find((c) => c.id === id)?.name || id;
  const say = [];
  if (config?.mode) {
    say.push(`mode ${name(config.modes, config.mode)}`);
  }
  if (config?.model) {
    say.push(`model ${name(config.models, config.model)}`);
  }
  return say.join(" · ");
}

// planMark is the mark of a plan entry's status: to do, doing, done.
// promptWords is a turn's input as its header shows it: the text of its
// text blocks, then a line for each image, "image (N KB)", and each file,
// by its path. The log holds no image's data, only its size.
export function promptWords(input) {
  const blocks = input ?? [];
  const lines = [inputText(blocks.filter((i) => (i.type ?? "text") === "text"))].filter((s) => s !== "");
  for (const i of blocks) {
    if (i.type === "image") {
      lines.push(`image (${Math.max(1, Math.round((i.bytes ?? 0) / 1024))} KB)`);
    } else if (i.type === "file") {
      lines.push(`file ${i.path}`);
    }
  }
  return lines.join("\n");
}

export const planMark = (status) => ({ in_progress: "◐", completed: "✓" })[status] ?? "○";

// omittedWords says what a snapshot left out of a long turn ("" when
// nothing): the JSON events pages have it.
export function omittedWords(tools, parts) {
  const say = [];
  if (tools > 0) {
    say.push(`${tools} earlier ${tools === 1 ? "tool" : "tools"}`);
  }
  if (parts > 0) {
    say.push(`${parts} earlier message ${parts === 1 ? "part" : "parts"}`);
  }
  return say.length ? `${say.join(" and ")} not shown` : "";
}

// toolState is the state a tool card shows: a tool whose approval was
// denied and that then ended without running was denied, not failed (the
// agent reports it failed, or canceled).
export function toolState(status, denied) {
  return denied && (status === "failed" || status === "canceled") ? "denied" : status;
}

// outputWords is the line under a command's output: how it ended, and
// whether earlier output was dropped.
export function outputWords({ truncated, exit_code } = {}) {
  const say = [];
  if (truncated) {
    say.push("earlier output not shown");
  }
  if (exit_code !== null && exit_code !== undefined) {
    say.push(`exit code ${exit_code}`);
  }
  return say.join(" · ");
}

// Turn is the section of one turn.
class Turn {
  constructor(id, dock, workspace) {
    this.id = id;
    this.dock = dock;
    this.status = "";
    this.end = {};
    this.errorKeys = new Set();
    this.usage = null; // the last turn.usage data's usage
    this.cards = new Map(); // approval id -> ApprovalCard, while pending
    this.records = new Map(); // approval id -> DecisionRecord
    this.denials = new Set(); // approval ids the user denied
    this.deniedTools = new Set(); // tool call ids of those approvals
    this.toolStates = new Map(); // tool call id -> its last tool.updated data
    this.promptText = h("p", { class: "prompt-text" });
    this.prompt = h("div", { class: "prompt", hidden: true }, h("span", { class: "who", text: "You" }), this.promptText);
    this.reasoningParts = h("div", { class: "parts" });
    this.reasoning = h(
      "details",
      { class: "reasoning", hidden: true },
      h("summary", { text: "Reasoning" }),
      this.reasoningParts,
    );
    this.tools = h("ul", { class: "tools", "aria-label": "Tool calls", hidden: true });
    this.plan = h("ol", { class: "plan", "aria-label": "Plan", hidden: true });
    // What the snapshot left out of a long turn: a count, not the tools
    // (the JSON events pages have them).
    this.omitted = h("p", { class: "omitted", hidden: true });
    this.decisions = h("ul", { class: "decisions", "aria-label": "Approvals", hidden: true });
    this.answerParts = h("div", { class: "parts" });
    this.answer = h("div", { class: "answer", hidden: true }, h("span", { class: "who", text: "Agent" }), this.answerParts);
    this.errors = h("ul", { class: "errors", hidden: true });
    this.badge = h("span", { class: "badge" });
    this.detail = h("span", { class: "turn-detail" });
    this.changes = new TurnChanges(id, workspace);
    this.el = h(
      "li",
      { class: "turn", "data-turn-id": id },
      this.prompt,
      this.reasoning,
      this.plan,
      this.omitted,
      this.tools,
      this.decisions,
      this.answer,
      this.errors,
      this.changes.el,
      h("div", { class: "turn-foot" }, this.badge, this.detail),
    );
  }

  setInput(input) {
    const text = promptWords(input);
    if (text !== "") {
      this.promptText.textContent = text;
      this.prompt.hidden = false;
    }
  }

  setStatus(status, end = {}) {
    if (!status) {
      return;
    }
    this.status = status;
    this.end = end;
    this.el.dataset.status = status;
    this.#foot();
    if (this.done()) {
      this.changes.set(end.changes);
    }
  }

  // foot shows how the turn ended; a success with denials says so, in the
  // warning colour, since the agent did not do all it asked to.
  #foot() {
    const denied = this.status === "succeeded" && this.denials.size > 0;
    this.el.dataset.denied = String(this.denials.size);
    this.badge.className = `badge status-${denied ? "denied" : this.status}`;
    this.badge.textContent = denied ? denialWords(this.denials.size) : this.status;
    const bits = endDetail(this.end);
    // turn.completed's usage has the last figures; turn.usage the running
    // turn's so far.
    const used = usageWords(this.end.usage ?? this.usage);
    if (used !== "") {
      bits.push(used);
    }
    if (bits.length > 0 || this.status === "running" || this.status === "queued") {
      this.detail.textContent = bits.join(" · ");
    }
  }

  // endWords is how the turn ended, for announcements.
  get endWords() {
    return this.status === "succeeded" && this.denials.size > 0 ? denialWords(this.denials.size) : this.status;
  }

  done() {
    return this.status === "succeeded" || this.status === "failed" || this.status === "canceled";
  }

  upsertPart(p) {
    const reasoning = p.kind === "reasoning";
    const parent = reasoning ? this.reasoningParts : this.answerParts;
    let el = this.el.querySelector(`.part[data-part-id="${CSS.escape(p.part_id)}"]`);
    if (!el) {
      el = h("p", { class: `part ${reasoning ? "reasoning-part" : "text"}`, "data-part-id": p.part_id });
      insertSorted(parent, el, partKey(p));
    }
    // Last write wins: every update carries the whole part so far.
    if (el.textContent !== p.text) {
      el.textContent = p.text ?? "";
    }
    (reasoning ? this.reasoning : this.answer).hidden = false;
  }

  setParts(parts) {
    const keep = new Set(parts.map((p) => p.part_id));
    for (const el of this.el.querySelectorAll(".part")) {
      if (!keep.has(el.dataset.partId)) {
        el.remove();
      }
    }
    for (const p of parts) {
      this.upsertPart(p);
    }
  }

  upsertTool(t) {
    let card = this.tools.querySelector(`.tool[data-tool-id="${CSS.escape(t.tool_call_id)}"]`);
    if (!card) {
      card = h(
        "li",
        { class: "tool", "data-tool-id": t.tool_call_id },
        h("span", { class: "tool-kind" }),
        h("span", { class: "tool-title" }),
        h("span", { class: "badge" }),
        h("ul", { class: "locations", hidden: true }),
        h("pre", { class: "tool-output", hidden: true }),
        h("span", { class: "tool-output-end", hidden: true }),
      );
      insertSorted(this.tools, card, t.tool_call_id);
    }
    this.toolStates.set(t.tool_call_id, t);
    const status = toolState(t.status, this.deniedTools.has(t.tool_call_id));
    card.dataset.status = status;
    card.querySelector(".tool-kind").textContent = t.kind || "other";
    card.querySelector(".tool-title").textContent = t.title || "Tool call";
    const badge = card.querySelector(".badge");
    badge.className = `badge status-${status}`;
    badge.textContent = status;
    const locs = card.querySelector(".locations");
    locs.replaceChildren(
      ...(t.locations ?? []).map((l) => h("li", {}, h("code", { text: l.line ? `${l.path}:${l.line}` : l.path }))),
    );
    locs.hidden = locs.children.length === 0;
    this.tools.hidden = false;
    // Only a snapshot's tools carry their output; a tool.updated keeps it.
    if (t.output) {
      this.setOutput(t.output);
    }
  }

  // setOutput shows what a tool's command printed, which replaces what it
  // showed; a tool not shown yet has no card to show it in.
  setOutput(o) {
    const card = this.tools.querySelector(`.tool[data-tool-id="${CSS.escape(o.tool_call_id)}"]`);
    if (!card) {
      return;
    }
    const pre = card.querySelector(".tool-output");
    pre.textContent = o.text ?? "";
    pre.hidden = pre.textContent === "";
    const end = card.querySelector(".tool-output-end");
    end.textContent = outputWords(o);
    end.hidden = end.textContent === "";
  }

  // setUsage shows the running turn's usage so far, which replaces the
  // last, in its foot.
  setUsage(usage) {
    this.usage = usage ?? null;
    this.#foot();
  }

  // setPlan shows the agent's plan for the turn, which replaces the last;
  // null hides it.
  setPlan(plan) {
    const entries = plan?.entries ?? [];
    this.plan.replaceChildren(
      ...entries.map((e) =>
        h(
          "li",
          { class: `plan-entry status-${e.status}`, "data-priority": e.priority },
          h("span", { class: "plan-mark", "aria-hidden": "true", text: planMark(e.status) }),
          h("span", { class: "plan-content", text: e.content }),
        ),
      ),
    );
    this.plan.hidden = entries.length === 0;
  }

  // setOmitted shows how many tools and message parts of the turn the
  // snapshot left out.
  setOmitted(tools, parts) {
    this.omitted.textContent = omittedWords(tools, parts);
    this.omitted.hidden = this.omitted.textContent === "";
  }

  setTools(tools) {
    const keep = new Set(tools.map((t) => t.tool_call_id));
    for (const el of this.tools.querySelectorAll(".tool")) {
      if (!keep.has(el.dataset.toolId)) {
        el.remove();
        this.toolStates.delete(el.dataset.toolId);
      }
    }
    for (const t of tools) {
      this.upsertTool(t);
    }
    this.tools.hidden = this.tools.children.length === 0;
  }

  // record returns the line of an approval, made on first use.
  record(id, request) {
    let r = this.records.get(id);
    if (!r) {
      r = new DecisionRecord(id, request);
      this.records.set(id, r);
      insertSorted(this.decisions, r.el, id);
      this.decisions.hidden = false;
    }
    return r;
  }

  // addApproval shows the card of a pending approval in the dock, and its
  // line here; false if it is there.
  addApproval(a, options) {
    if (this.cards.has(a.approval_id) || this.records.get(a.approval_id)?.resolved) {
      return false;
    }
    const card = new ApprovalCard(a, options);
    card.el.dataset.turnId = this.id;
    this.cards.set(a.approval_id, card);
    insertSorted(this.dock, card.el, `${this.id}\u0000${a.approval_id}`);
    this.record(a.approval_id, a);
    return true;
  }

  removeApproval(id) {
    const card = this.cards.get(id);
    if (!card) {
      return;
    }
    this.cards.delete(id);
    // Keep the keyboard in the transcript when the focused card goes.
    const hadFocus = card.el.contains(document.activeElement);
    card.el.remove();
    if (hadFocus) {
      this.el.setAttribute("tabindex", "-1");
      this.el.focus({ preventScroll: true });
    }
  }

  // closeApprovals takes away the cards of approvals that are no longer
  // pending, and says so on their lines until their outcome is known.
  closeApprovals(keep = new Set()) {
    for (const id of [...this.cards.keys()]) {
      if (!keep.has(id)) {
        this.removeApproval(id);
        this.records.get(id)?.close();
      }
    }
  }

  // resolve keeps the outcome of an approval on its line. It returns the
  // record, or null when it was resolved already.
  resolve(d, request, by) {
    this.removeApproval(d.approval_id);
    const r = this.record(d.approval_id, request);
    if (r.resolved) {
      return null;
    }
    r.resolve(d, request, by);
    if (r.outcome.key === "denied" || r.outcome.key === "always_denied") {
      this.denials.add(d.approval_id);
      this.#foot();
      // The tool may have ended before the page read the denial (a
      // snapshot's tools come before the log behind it).
      const tool = request?.tool_call_id;
      if (tool) {
        this.deniedTools.add(tool);
        if (this.toolStates.has(tool)) {
          this.upsertTool(this.toolStates.get(tool));
        }
      }
    }
    return r;
  }

  addError(key, e) {
    if (this.errorKeys.has(key)) {
      return;
    }
    this.errorKeys.add(key);
    this.errors.append(h("li", { class: "error", text: e.message || e.code || "error" }));
    this.errors.hidden = false;
  }
}

// SNAPSHOT_HOLDS are the event types whose effect a snapshot shows in full.
const SNAPSHOT_HOLDS = new Set(["turn.started", "message.updated", "message.completed", "tool.updated", "approval.requested", "plan.updated", "tool.output", "turn.usage"]);

// Transcript is the list of turns of one sandbox.
//
// Options: dock is the element that holds the cards of pending approvals;
// decide(approval, body) answers an approval and returns a
// promise; decided is a set-like {has, add} of the approval ids this tab
// answered (it outlives a reload); onChange() is told that the current turn
// or the pending approvals changed; announce(text) speaks a change to screen
// readers; notice(text) shows a message that belongs to no turn; onPrompt(id,
// input) is told each turn's input as it starts, live; workspace holds the
// hooks of the turns' changes (diff, revert, open: see TurnChanges).
export class Transcript {
  #list;
  #o;
  #turns = new Map();
  #requests = new Map(); // approval id -> approval.requested data
  #resolved = new Set();
  #inflight = new Map(); // approval id -> this tab's answer on its way
  #snapLast = 0n;
  #snapTurn = null;
  #current = null;
  #offline = false;
  #revertable = false;
  #reverts = new Map(); // workspace.reverted event id -> its line
  #earlierTurn = ""; // the last turn applyEarlier saw, in log order

  constructor(list, options) {
    this.#list = list;
    this.#o = {
      decided: new Set(),
      onChange() {},
      announce() {},
      notice() {},
      onPrompt() {},
      ...options,
    };
    this.#o.workspace = { diff: async () => "", revert() {}, open() {}, ...options.workspace };
  }

  get current() {
    return this.#current;
  }

  // pending is the number of approvals waiting for an answer.
  get pending() {
    let n = 0;
    for (const t of this.#turns.values()) {
      n += t.cards.size;
    }
    return n;
  }

  // empty reports whether the transcript shows no turn at all.
  get empty() {
    return this.#turns.size === 0;
  }

  // snapshotTurn is the id of the turn the last snapshot showed (the
  // sandbox's current or last turn), or null when it has had none.
  get snapshotTurn() {
    return this.#snapTurn;
  }

  clear() {
    this.#list.replaceChildren();
    this.#o.dock.replaceChildren();
    this.#turns.clear();
    this.#reverts.clear();
    this.#earlierTurn = "";
    this.#requests.clear();
    this.#resolved.clear();
    this.#inflight.clear();
    this.#snapLast = 0n;
    this.#snapTurn = null;
    this.#current = null;
    this.#o.onChange();
  }

  // setOffline disables the approval buttons while the page cannot reach
  // the server, so that an answer is not lost on the way.
  setOffline(offline) {
    this.#offline = offline;
    for (const t of this.#turns.values()) {
      for (const card of t.cards.values()) {
        card.setOffline(offline);
      }
    }
  }

  // setRevertable enables the turns' Revert buttons: not while a turn
  // runs, nor while the page cannot reach the server.
  setRevertable(ok) {
    this.#revertable = ok;
    for (const t of this.#turns.values()) {
      t.changes.setRevertable(ok);
    }
  }

  #turn(id) {
    const key = id || "~"; // an approval outside any turn goes last
    let t = this.#turns.get(key);
    if (!t) {
      t = new Turn(key, this.#o.dock, this.#o.workspace);
      t.changes.setRevertable(this.#revertable);
      this.#turns.set(key, t);
      insertSorted(this.#list, t.el, key);
    }
    return t;
  }

  #setCurrent(turn) {
    const same = turn?.id === this.#current?.id && turn?.status === this.#current?.status;
    if (!same) {
      this.#current = turn ? { id: turn.id, status: turn.status } : null;
    }
  }

  #addCard(t, a) {
    this.#requests.set(a.approval_id, a);
    if (this.#resolved.has(a.approval_id)) {
      return false;
    }
    return t.addApproval(a, {
      offline: this.#offline,
      send: (body) => {
        const p = this.#o.decide(a, body).then(() => this.#o.decided.add(a.approval_id));
        // The stream may bring approval.resolved before this answer: the
        // record waits on it to say who answered.
        this.#inflight.set(
          a.approval_id,
          p.then(
            () => true,
            () => false,
          ),
        );
        return p;
      },
      onGone: () => t.removeApproval(a.approval_id),
    });
  }

  // #resolve keeps the outcome of an approval in its turn. It returns the
  // record, or null when it was there already.
  #resolve(turnID, d) {
    this.#resolved.add(d.approval_id);
    let t = this.#turn(turnID);
    for (const other of this.#turns.values()) {
      if (other.cards.has(d.approval_id)) {
        t = other; // where the page showed it
      }
    }
    const inflight = this.#inflight.get(d.approval_id);
    let by = "elsewhere";
    if (this.#o.decided.has(d.approval_id)) {
      by = "here";
    } else if (inflight) {
      by = "asking";
    }
    const record = t.resolve(d, this.#requests.get(d.approval_id), by);
    if (record && by === "asking") {
      inflight.then((ours) => record.setBy(ours ? "here" : "elsewhere"));
    }
    return record;
  }

  // addTurn shows a turn the page just started, before its events arrive.
  addTurn(turn) {
    const t = this.#turn(turn.id);
    t.setInput(turn.input);
    if (!t.status) {
      t.setStatus(turn.status);
      if (!t.done()) {
        this.#setCurrent(turn);
      }
    }
    this.#o.onChange();
  }

  // applySnapshot makes the view agree with a snapshot: its turn's parts,
  // tools and status, and the sandbox's pending approvals.
  applySnapshot(snap, { reset = false } = {}) {
    if (reset) {
      this.clear();
    }
    this.#snapLast = BigInt(snap.last_event_id ?? 0);
    const st = snap.turn;
    this.#snapTurn = st ? st.id : null;
    const pending = new Set((snap.approvals ?? []).map((a) => a.approval_id));
    for (const t of this.#turns.values()) {
      // Resolved while the page was away: its approval.resolved follows in
      // the replay, or in the log read behind the snapshot.
      t.closeApprovals(pending);
    }
    if (st) {
      const t = this.#turn(st.id);
      t.setInput(st.input);
      // The turn resource has no duration; its two times give the same one
      // turn.completed reports.
      const duration_ms = st.completed_at ? Date.parse(st.completed_at) - Date.parse(st.created_at) : undefined;
      t.setStatus(st.status, { ...t.end, stop_reason: st.stop_reason, duration_ms: t.end.duration_ms ?? duration_ms });
      t.setParts(snap.messages ?? []);
      t.setTools(snap.tools ?? []);
      t.setOmitted(snap.tools_omitted ?? 0, snap.messages_omitted ?? 0);
      t.setPlan(snap.plan ?? null);
      t.setUsage(st.usage ?? null);
      for (const a of snap.approvals ?? []) {
        this.#addCard(t, a);
      }
    } else {
      for (const a of snap.approvals ?? []) {
        this.#addCard(this.#turn(null), a);
      }
    }
    // The turns that wait behind it show as queued until they start.
    for (const q of snap.sandbox?.queued_turns ?? []) {
      const t = this.#turn(q.id);
      t.setInput(q.input);
      if (!t.status) {
        t.setStatus("queued");
      }
    }
    const cur = snap.sandbox?.current_turn;
    this.#setCurrent(cur && !["succeeded", "failed", "canceled"].includes(cur.status) ? cur : null);
    this.#o.onChange();
  }

  applyEvent(env) {
    // A replay after a reconnection repeats what the snapshot already
    // shows of its turn; applying older parts, tools and approvals again
    // would only flicker back and forth. How the turn ended and its errors
    // are not in the snapshot, so those still apply.
    if (env.turn_id && env.turn_id === this.#snapTurn && BigInt(env.id) <= this.#snapLast && SNAPSHOT_HOLDS.has(env.type)) {
      if (env.type === "approval.requested") {
        this.#requests.set(env.data.approval_id, env.data);
      }
      return;
    }
    this.#apply(env, true);
    this.#o.onChange();
  }

  // applyEarlier shows an event of a turn before the snapshot's, read from
  // the log on demand, in log order. It leaves the current turn alone and
  // announces nothing. It returns false, and shows nothing, from the first
  // event of the snapshot's turn on: the earlier turns end there.
  applyEarlier(env) {
    if (env.turn_id === this.#snapTurn || BigInt(env.id) > this.#snapLast) {
      return false;
    }
    if (env.turn_id) {
      this.#earlierTurn = env.turn_id;
      this.#apply(env, false);
    } else if (env.type === "workspace.reverted") {
      this.#revertLine(env, this.#earlierTurn);
    }
    return true;
  }

  // applyBehind shows what the snapshot leaves out of its own turn, read
  // from the log up to the snapshot: what became of its approvals, its
  // errors and how it ended. Other events it ignores.
  applyBehind(env) {
    if (env.type === "workspace.reverted" && !env.turn_id && this.#snapTurn && BigInt(env.id) <= this.#snapLast) {
      this.#revertLine(env, this.#snapTurn); // read from after the snapshot turn's end
      return;
    }
    if (env.turn_id !== this.#snapTurn || !env.turn_id || BigInt(env.id) > this.#snapLast) {
      return;
    }
    if (["approval.requested", "approval.resolved", "sandbox.error", "turn.completed"].includes(env.type)) {
      this.#apply(env, false);
      this.#o.onChange();
    }
  }

  // #apply shows one event; live tells whether it is news (the current
  // turn, announcements, notices) or history.
  #apply(env, live) {
    const d = env.data ?? {};
    switch (env.type) {
      case "turn.started": {
        const t = this.#turn(env.turn_id);
        t.setInput(d.input);
        if (live || !t.done()) {
          t.setStatus("running");
        }
        if (live) {
          this.#setCurrent({ id: env.turn_id, status: "running" });
          this.#o.onPrompt(env.turn_id, d.input);
        }
        break;
      }
      case "turn.queued": {
        // It waits behind the open turn; a replay never takes back a start.
        const t = this.#turn(env.turn_id);
        t.setInput(d.input);
        if (!t.status) {
          t.setStatus("queued");
        }
        break;
      }
      case "turn.completed": {
        const t = this.#turn(env.turn_id);
        t.setStatus(d.status, d);
        t.closeApprovals();
        if (!live) {
          break;
        }
        if (this.#current?.id === env.turn_id) {
          this.#setCurrent(null);
        }
        this.#o.announce(`Turn ${t.endWords}`);
        break;
      }
      case "message.updated":
        this.#turn(env.turn_id).upsertPart(d);
        break;
      case "message.completed":
        for (const p of d.parts ?? []) {
          this.#turn(env.turn_id).upsertPart({ ...p, message_id: d.message_id });
        }
        break;
      case "tool.updated":
        this.#turn(env.turn_id).upsertTool(d);
        break;
      case "plan.updated":
        this.#turn(env.turn_id).setPlan(d);
        break;
      case "turn.usage":
        this.#turn(env.turn_id).setUsage(d.usage);
        break;
      case "tool.output":
        this.#turn(env.turn_id).setOutput(d);
        break;
      case "approval.requested":
        // From the log, an approval is shown by its outcome: a card there
        // could no longer be answered.
        this.#requests.set(d.approval_id, d);
        if (live && this.#addCard(this.#turn(env.turn_id), d)) {
          this.#o.announce(`Approval needed: ${d.title || "a tool call"}`);
        }
        break;
      case "approval.resolved": {
        const record = this.#resolve(env.turn_id, d);
        if (record && live) {
          this.#o.announce(record.text);
        }
        break;
      }
      case "sandbox.error":
        if (env.turn_id) {
          this.#turn(env.turn_id).addError(env.id, d);
        } else if (live) {
          this.#o.notice(d.message || d.code);
        }
        break;
      case "workspace.reverted": {
        // A revert waits for no turn to run, so it follows the newest.
        const after = [...this.#turns.keys()].filter((k) => k !== "~").sort().at(-1) ?? "";
        if (this.#revertLine(env, after) && live) {
          this.#o.announce("Workspace reverted");
        }
        break;
      }
    }
  }

  // revertLine shows a workspace.reverted event as a line after turn
  // after (a turn id, "" for none); false if it is there already.
  #revertLine(env, after) {
    if (this.#reverts.has(env.id)) {
      return false;
    }
    const target = this.#turns.get(env.data?.turn_id);
    target?.changes.markReverted();
    const li = revertedLine(env, target?.promptText.textContent ?? "");
    this.#reverts.set(env.id, li);
    // After the turn's section, in log order among lines after it.
    insertSorted(this.#list, li, `${after}\u0001${env.id.padStart(20, "0")}`);
    return true;
  }
}
