// approval.js renders the two shapes of an approval in the transcript: the
// card of a pending one, with a button per way to answer it, and, once it is
// resolved, the line that keeps its outcome (who allowed or denied what, or
// why nobody did), so that the transcript still says later why a tool did
// or did not run.
//
// Agent text (titles, option labels) is set as textContent only.
import { h } from "./dom.js";

// answeredHere is the set of approvals this tab answered, kept in
// sessionStorage (with the token, for the tab's life), so that a reload
// still says who answered what.
export const answeredHere = {
  key: "sparkles.decided",
  ids: null,
  has(id) {
    return this.load().has(id);
  },
  add(id) {
    const ids = this.load();
    ids.add(id);
    sessionStorage.setItem(this.key, JSON.stringify([...ids].slice(-500)));
  },
  load() {
    if (!this.ids) {
      try {
        this.ids = new Set(JSON.parse(sessionStorage.getItem(this.key) ?? "[]"));
      } catch {
        this.ids = new Set();
      }
    }
    return this.ids;
  },
};

// OFFLINE_NOTE is what a card says while its buttons wait for the server.
const OFFLINE_NOTE = "Waiting for the connection to answer.";

// ALWAYS names the lasting option kinds as their buttons begin.
const ALWAYS = { allow_always: "Always allow", reject_always: "Always deny" };

// lastingText is the text of a lasting option's button: ALWAYS, then the
// agent's label, less the words of ALWAYS when the label starts with them
// ("Always allow writes", not "Always allow: Always allow writes"). The
// words that say it lasts are always ours, whatever the label claims.
export function lastingText(o) {
  const prefix = ALWAYS[o.kind];
  const label = (o.label || "").trim();
  if (label === "") {
    return prefix;
  }
  const head = label.slice(0, prefix.length);
  if (head.toLowerCase() === prefix.toLowerCase() && !/^\p{L}/u.test(label.slice(prefix.length))) {
    return prefix + label.slice(prefix.length);
  }
  return `${prefix}: ${label}`;
}

// ApprovalCard is the card of one pending approval.
//
// send(body) answers it ({decision} or {option_id}) and returns a promise;
// the card disables its buttons while that runs and while the page is
// offline, and says in its note how the answer went. onGone() is called when
// the server says someone else answered first.
export class ApprovalCard {
  #a;
  #send;
  #onGone;
  #buttons = [];
  #note;
  #busy = false;
  #offline = false;
  // inflight is the promise of this tab's answer while it is on its way; it
  // resolves to true when the server took it, false when it did not.
  inflight = null;

  constructor(a, { send, onGone, offline = false }) {
    this.#a = a;
    this.#send = send;
    this.#onGone = onGone;
    this.#offline = offline;
    const titleID = `title-${a.approval_id}`;
    const hintID = `hint-${a.approval_id}`;
    this.#note = h("p", { class: "approval-note", role: "status" });
    const title = a.title || "A tool call";
    const options = a.options ?? [];
    // A plain decision answers the agent's once-option, and only the
    // server knows the rest; so a button that says "once" is shown only
    // when the agent offers a once-option (or, with no options to go by,
    // the server is left to choose).
    const offers = (kind) => options.length === 0 || options.some((o) => o.kind === kind);
    const actions = h("div", { class: "approval-actions" });
    if (offers("allow_once")) {
      actions.append(this.#button("Allow once", "approve primary", { decision: "approve" }, `Allow once: ${title}`));
    }
    if (offers("reject_once")) {
      actions.append(this.#button("Deny", "deny", { decision: "deny" }, `Deny: ${title}`));
    }
    // A lasting choice is never the plain decision: each gets a button of
    // its own that says it lasts, whatever the agent's label claims, and
    // sends that very option.
    const lasting = options.filter((o) => ALWAYS[o.kind]);
    for (const o of lasting) {
      const text = lastingText(o);
      actions.append(this.#button(text, `always ${o.kind}`, { option_id: o.option_id }, `${text} (${title})`, hintID));
    }
    const meta = [a.kind, a.expires_at ? `expires ${new Date(a.expires_at).toLocaleTimeString()}` : ""].filter(Boolean).join(" · ");
    this.el = h(
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
      this.#note,
    );
    this.#sync();
    if (offline) {
      this.#note.textContent = OFFLINE_NOTE;
    }
  }

  #button(label, cls, body, aria, describedBy) {
    const b = h("button", { type: "button", class: cls, text: label, "aria-label": aria, "aria-describedby": describedBy });
    b.addEventListener("click", () => this.#decide(body));
    this.#buttons.push(b);
    return b;
  }

  setOffline(offline) {
    if (offline === this.#offline) {
      return;
    }
    this.#offline = offline;
    this.#sync();
    if (!this.#busy) {
      this.#note.textContent = offline ? OFFLINE_NOTE : "";
    }
  }

  #sync() {
    for (const b of this.#buttons) {
      b.disabled = this.#busy || this.#offline;
    }
  }

  #decide(body) {
    this.#busy = true;
    this.#sync();
    this.#note.textContent = "Sending…";
    this.inflight = this.#send(body).then(
      () => {
        // The card goes when approval.resolved arrives on the stream.
        this.#note.textContent = "Sent; waiting for the agent…";
        return true;
      },
      (e) => {
        this.#busy = false;
        if (e.type === "approval_resolved") {
          this.#onGone();
          return false;
        }
        this.#sync();
        this.#note.textContent = `Could not send: ${e.message}`;
        return false;
      },
    );
  }
}

// outcome words a resolved approval (approval.resolved data) for people,
// with the request it answers when the page saw it (its options tell a
// once-option from an always-option). It returns {key, label, why}: key is
// a stable name for the outcome (data-outcome), why says what made it end so
// when nobody answered it.
export function outcome(d, request) {
  const kind = request?.options?.find((o) => o.option_id === d.option_id)?.kind;
  switch (d.decision) {
    case "approved":
      if (kind === "allow_always") {
        return { key: "always_allowed", label: "Always allowed", why: "" };
      }
      return kind === "allow_once" ? { key: "allowed_once", label: "Allowed once", why: "" } : { key: "allowed", label: "Allowed", why: "" };
    case "denied":
      if (kind === "reject_always") {
        return { key: "always_denied", label: "Always denied", why: "" };
      }
      return { key: "denied", label: "Denied", why: "" };
    case "canceled":
      if (d.reason === "timeout") {
        return { key: "timed_out", label: "Timed out", why: "nobody answered in time" };
      }
      return { key: "canceled", label: "Canceled", why: d.reason === "agent_exited" ? "the agent exited" : "the turn was canceled" };
    default:
      return { key: d.decision || "failed", label: "Failed", why: d.reason === "agent_exited" ? "the agent exited" : (d.reason ?? "").replaceAll("_", " ") };
  }
}

// BY says who answered an approval, as far as this tab can know.
const BY = {
  here: "in this tab",
  elsewhere: "elsewhere",
  asking: "…",
};

const BY_TITLE = {
  here: "You answered it in this tab.",
  elsewhere: "Answered from somewhere else: another tab, the CLI or the API.",
  asking: "",
};

// DecisionRecord is the line an approval keeps in its turn: while it is
// pending it points at its card, once resolved it says what became of it.
export class DecisionRecord {
  #outcome;
  #title;
  #by;

  // request is the approval.requested data, or undefined when the page
  // never saw it (retention removed it).
  constructor(approvalID, request) {
    this.#outcome = h("span", { class: "decision-outcome", text: "Waiting" });
    this.#title = h("span", { class: "decision-title", text: request?.title || "A tool call" });
    this.#by = h("span", { class: "decision-by", text: "answer it below" });
    this.outcome = { key: "waiting", label: "Waiting" };
    this.el = h("li", { class: "decision", "data-approval-id": approvalID, "data-outcome": "waiting" }, this.#outcome, this.#title, this.#by);
  }

  get resolved() {
    return this.el.dataset.decision !== undefined;
  }

  // close marks an approval that is no longer pending although the page
  // has not seen how it was resolved (it happened while the page was away);
  // resolve tells the rest when it comes.
  close() {
    if (this.resolved) {
      return;
    }
    this.outcome = { key: "closed", label: "Answered" };
    this.el.dataset.outcome = "closed";
    this.#outcome.textContent = "Answered";
    this.#by.textContent = "";
  }

  // resolve shows the outcome: d is the approval.resolved data, request the
  // approval.requested data if known, by one of "here", "elsewhere",
  // "asking" (this tab's answer is still on its way) for a user's decision.
  resolve(d, request, by) {
    const o = outcome(d, request);
    this.outcome = o;
    this.el.dataset.decision = d.decision;
    this.el.dataset.outcome = o.key;
    this.#outcome.textContent = o.label;
    if (request?.title) {
      this.#title.textContent = request.title;
    }
    if (d.reason === "user" || !d.reason) {
      this.setBy(by);
    } else {
      this.#by.textContent = o.why;
      this.#by.title = "";
    }
  }

  setBy(by) {
    this.el.dataset.by = by;
    this.#by.textContent = BY[by] ?? "";
    this.#by.title = BY_TITLE[by] ?? "";
  }

  // text is the record as one sentence, for announcements.
  get text() {
    return `${this.outcome.label}: ${this.#title.textContent}`;
  }
}
