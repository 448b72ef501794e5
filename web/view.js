// view.js renders a sandbox's transcript: one section per turn with the
// prompt, the reasoning, the tool cards, the pending approvals, the answer
// and how the turn ended. It is fed the snapshot and the durable events of
// the sandbox's stream, and renders the same view from either, so a reload
// mid-turn shows what was there before it.
//
// Everything the agent wrote (message text, tool titles, paths, option
// labels, error messages) goes into the page as textContent, never as HTML.

// h creates an element. props sets text (textContent), class (className),
// hidden, and any other attribute; children are nodes or strings.
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null || v === false) {
      continue;
    }
    if (k === "text") {
      el.textContent = v;
    } else if (k === "class") {
      el.className = v;
    } else if (k === "hidden") {
      el.hidden = true;
    } else {
      el.setAttribute(k, v === true ? "" : String(v));
    }
  }
  for (const c of children) {
    el.append(c);
  }
  return el;
}

// insertSorted puts el into parent before the first child whose key sorts
// after key, so that the order of a list does not depend on arrival order.
function insertSorted(parent, el, key) {
  el.dataset.key = key;
  for (const c of parent.children) {
    if (c.dataset.key > key) {
      parent.insertBefore(el, c);
      return;
    }
  }
  parent.append(el);
}

const partKey = (p) => `${p.message_id ?? ""}\u0000${String(p.index ?? 0).padStart(8, "0")}\u0000${p.part_id}`;

const inputText = (input) => (input ?? []).map((i) => i.text ?? "").join("\n");

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
  canceled: "canceled",
  error: "ended by an error",
};

// ALWAYS names the lasting option kinds as their buttons begin.
const ALWAYS = { allow_always: "Always allow", reject_always: "Always deny" };

// Turn is the section of one turn.
class Turn {
  constructor(id, decide) {
    this.id = id;
    this.decide = decide;
    this.status = "";
    this.errorKeys = new Set();
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
    this.approvals = h("div", { class: "approvals" });
    this.answerParts = h("div", { class: "parts" });
    this.answer = h("div", { class: "answer", hidden: true }, h("span", { class: "who", text: "Agent" }), this.answerParts);
    this.errors = h("ul", { class: "errors", hidden: true });
    this.badge = h("span", { class: "badge" });
    this.detail = h("span", { class: "turn-detail" });
    this.el = h(
      "li",
      { class: "turn", "data-turn-id": id },
      this.prompt,
      this.reasoning,
      this.tools,
      this.approvals,
      this.answer,
      this.errors,
      h("div", { class: "turn-foot" }, this.badge, this.detail),
    );
  }

  setInput(input) {
    const text = inputText(input);
    if (text !== "") {
      this.promptText.textContent = text;
      this.prompt.hidden = false;
    }
  }

  setStatus(status, { stop_reason, error, duration_ms } = {}) {
    if (!status) {
      return;
    }
    this.status = status;
    this.el.dataset.status = status;
    this.badge.className = `badge status-${status}`;
    this.badge.textContent = status;
    const bits = [];
    if (stop_reason && STOP_REASONS[stop_reason] !== "") {
      bits.push(STOP_REASONS[stop_reason] ?? stop_reason.replaceAll("_", " "));
    }
    if (error?.message) {
      bits.push(error.message);
    }
    if (duration_ms) {
      bits.push(duration(duration_ms));
    }
    if (bits.length > 0 || status === "running" || status === "queued") {
      this.detail.textContent = bits.join(" · ");
    }
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
      );
      insertSorted(this.tools, card, t.tool_call_id);
    }
    card.dataset.status = t.status;
    card.querySelector(".tool-kind").textContent = t.kind || "other";
    card.querySelector(".tool-title").textContent = t.title || "Tool call";
    const badge = card.querySelector(".badge");
    badge.className = `badge status-${t.status}`;
    badge.textContent = t.status;
    const locs = card.querySelector(".locations");
    locs.replaceChildren(
      ...(t.locations ?? []).map((l) => h("li", {}, h("code", { text: l.line ? `${l.path}:${l.line}` : l.path }))),
    );
    locs.hidden = locs.children.length === 0;
    this.tools.hidden = false;
  }

  setTools(tools) {
    const keep = new Set(tools.map((t) => t.tool_call_id));
    for (const el of this.tools.querySelectorAll(".tool")) {
      if (!keep.has(el.dataset.toolId)) {
        el.remove();
      }
    }
    for (const t of tools) {
      this.upsertTool(t);
    }
    this.tools.hidden = this.tools.children.length === 0;
  }

  approval(id) {
    return this.approvals.querySelector(`.approval[data-approval-id="${CSS.escape(id)}"]`);
  }

  addApproval(a) {
    if (this.approval(a.approval_id)) {
      return false;
    }
    const titleID = `title-${a.approval_id}`;
    const hintID = `hint-${a.approval_id}`;
    const note = h("p", { class: "approval-note", role: "status" });
    const buttons = [];
    const button = (label, cls, body, aria, describedBy) => {
      const b = h("button", { type: "button", class: cls, text: label, "aria-label": aria, "aria-describedby": describedBy });
      b.addEventListener("click", () => this.#decide(a, body, buttons, note));
      buttons.push(b);
      return b;
    };
    const title = a.title || "A tool call";
    const options = a.options ?? [];
    // A plain decision answers the agent's once-option, and only the
    // server knows the rest; so a button that says "once" is shown only
    // when the agent offers a once-option (or, with no options to go by,
    // the server is left to choose).
    const offers = (kind) => options.length === 0 || options.some((o) => o.kind === kind);
    const actions = h("div", { class: "approval-actions" });
    if (offers("allow_once")) {
      actions.append(button("Allow once", "approve primary", { decision: "approve" }, `Allow once: ${title}`));
    }
    if (offers("reject_once")) {
      actions.append(button("Deny", "deny", { decision: "deny" }, `Deny: ${title}`));
    }
    // A lasting choice is never the plain decision: each gets a button of
    // its own that says it lasts, whatever the agent's label claims, and
    // sends that very option.
    const lasting = options.filter((o) => ALWAYS[o.kind]);
    for (const o of lasting) {
      const text = `${ALWAYS[o.kind]}: ${o.label || o.kind.replaceAll("_", " ")}`;
      actions.append(button(text, `always ${o.kind}`, { option_id: o.option_id }, `${text} (${title})`, hintID));
    }
    const meta = [a.kind, a.expires_at ? `expires ${new Date(a.expires_at).toLocaleTimeString()}` : ""].filter(Boolean).join(" · ");
    const card = h(
      "section",
      { class: "approval", "data-approval-id": a.approval_id, "aria-labelledby": titleID },
      h("p", { class: "approval-head", text: "Approval needed" }),
      h("p", { class: "approval-title", id: titleID, text: title }),
      h("p", { class: "approval-meta", text: meta }),
      actions,
      h("p", {
        class: "approval-hint",
        id: hintID,
        hidden: lasting.length === 0,
        text: "An “Always” choice lasts: the agent may stop asking before actions like this one.",
      }),
      note,
    );
    insertSorted(this.approvals, card, a.approval_id);
    return true;
  }

  async #decide(a, body, buttons, note) {
    for (const b of buttons) {
      b.disabled = true;
    }
    note.textContent = "Sending…";
    try {
      await this.decide(a, body);
      // The card goes when approval.resolved arrives on the stream.
      note.textContent = "Sent; waiting for the agent…";
    } catch (e) {
      if (e.type === "approval_resolved") {
        this.removeApproval(a.approval_id);
        return;
      }
      note.textContent = `Could not send: ${e.message}`;
      for (const b of buttons) {
        b.disabled = false;
      }
    }
  }

  removeApproval(id) {
    const card = this.approval(id);
    if (!card) {
      return;
    }
    // Keep the keyboard in the transcript when the focused card goes.
    const hadFocus = card.contains(document.activeElement);
    card.remove();
    if (hadFocus) {
      this.el.setAttribute("tabindex", "-1");
      this.el.focus({ preventScroll: true });
    }
  }

  clearApprovals() {
    for (const card of [...this.approvals.children]) {
      this.removeApproval(card.dataset.approvalId);
    }
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
const SNAPSHOT_HOLDS = new Set(["turn.started", "message.updated", "message.completed", "tool.updated", "approval.requested"]);

// Transcript is the list of turns of one sandbox.
//
// Options: decide(approval, body) answers an approval and returns a
// promise; onCurrent(turn) is told the open turn ({id, status}) or null;
// announce(text) speaks a change to screen readers; notice(text) shows a
// message that belongs to no turn.
export class Transcript {
  #list;
  #o;
  #turns = new Map();
  #resolved = new Set();
  #snapLast = 0n;
  #snapTurn = null;
  #current = null;

  constructor(list, options) {
    this.#list = list;
    this.#o = { onCurrent() {}, announce() {}, notice() {}, ...options };
  }

  get current() {
    return this.#current;
  }

  // snapshotTurn is the id of the turn the last snapshot showed (the
  // sandbox's current or last turn), or null when it has had none.
  get snapshotTurn() {
    return this.#snapTurn;
  }

  clear() {
    this.#list.replaceChildren();
    this.#turns.clear();
    this.#resolved.clear();
    this.#snapLast = 0n;
    this.#snapTurn = null;
    this.#setCurrent(null);
  }

  #turn(id) {
    const key = id || "~"; // an approval outside any turn goes last
    let t = this.#turns.get(key);
    if (!t) {
      t = new Turn(key, (a, body) => this.#o.decide(a, body));
      this.#turns.set(key, t);
      insertSorted(this.#list, t.el, key);
    }
    return t;
  }

  #setCurrent(turn) {
    const same = turn?.id === this.#current?.id && turn?.status === this.#current?.status;
    if (same) {
      return;
    }
    this.#current = turn ? { id: turn.id, status: turn.status } : null;
    this.#o.onCurrent(this.#current);
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
      for (const card of [...t.approvals.children]) {
        if (!pending.has(card.dataset.approvalId)) {
          t.removeApproval(card.dataset.approvalId);
        }
      }
    }
    if (st) {
      const t = this.#turn(st.id);
      t.setInput(st.input);
      // The turn resource has no duration; its two times give the same one
      // turn.completed reports.
      const duration_ms = st.completed_at ? Date.parse(st.completed_at) - Date.parse(st.created_at) : undefined;
      t.setStatus(st.status, { stop_reason: st.stop_reason, duration_ms });
      t.setParts(snap.messages ?? []);
      t.setTools(snap.tools ?? []);
      for (const a of snap.approvals ?? []) {
        t.addApproval(a);
      }
    } else {
      for (const a of snap.approvals ?? []) {
        this.#turn(null).addApproval(a);
      }
    }
    const cur = snap.sandbox?.current_turn;
    this.#setCurrent(cur && !["succeeded", "failed", "canceled"].includes(cur.status) ? cur : null);
  }

  applyEvent(env) {
    // A replay after a reconnection repeats what the snapshot already
    // shows of its turn; applying older parts, tools and approvals again
    // would only flicker back and forth. How the turn ended and its errors
    // are not in the snapshot, so those still apply.
    if (env.turn_id && env.turn_id === this.#snapTurn && BigInt(env.id) <= this.#snapLast && SNAPSHOT_HOLDS.has(env.type)) {
      return;
    }
    this.#apply(env, true);
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
      this.#apply(env, false);
    }
    return true;
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
        }
        break;
      }
      case "turn.completed": {
        const t = this.#turn(env.turn_id);
        t.setStatus(d.status, d);
        t.clearApprovals();
        if (!live) {
          break;
        }
        if (this.#current?.id === env.turn_id) {
          this.#setCurrent(null);
        }
        this.#o.announce(`Turn ${d.status}`);
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
      case "approval.requested":
        if (!this.#resolved.has(d.approval_id) && this.#turn(env.turn_id).addApproval(d) && live) {
          this.#o.announce(`Approval needed: ${d.title || "a tool call"}`);
        }
        break;
      case "approval.resolved":
        this.#resolved.add(d.approval_id);
        for (const t of this.#turns.values()) {
          t.removeApproval(d.approval_id);
        }
        break;
      case "sandbox.error":
        if (env.turn_id) {
          this.#turn(env.turn_id).addError(env.id, d);
        } else if (live) {
          this.#o.notice(d.message || d.code);
        }
        break;
    }
  }
}
