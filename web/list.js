// list.js is the console's list of sandboxes: every sandbox the server
// has, newest first, each with a name a person can tell apart, the time of
// its last activity and whether a turn runs in it now. Deleted sandboxes
// stay out of the way unless asked for.
//
// A name is the sandbox's metadata.name when it has one, else its first
// prompt. The list answer carries no prompt (current_turn is the running
// turn only, and names would change with every turn), so the first prompt
// is read from the log: the first page of a row's events, once a row comes
// into view, once per sandbox, a few at a time. A sandbox that had no turn
// yet is asked again only when its log has grown, and a turn the page
// starts or sees start names it at once.
import { firstTurnStart } from "./history.js";
import { ago, h, inputText, sandboxState } from "./dom.js";

// The most a name shows of a first prompt; the rest is in the row's title.
const NAME_MAX = 60;
// Lookups of first prompts at once: the page shares the server with agents.
const LOOKUPS = 2;
// The list is read in pages of the API's largest size.
const PAGE = 100;

function truncate(text, max) {
  const line = text.trim().split("\n")[0];
  return line.length > max ? line.slice(0, max - 1).trimEnd() + "…" : line;
}

// SandboxList keeps the sandboxes as last seen and renders them into ul.
//
// Options: onDelete(id) asks to delete a sandbox; onRender() is told that
// the list was drawn again (names may have changed).
export class SandboxList {
  #api;
  #ul;
  #o;
  #sandboxes = new Map(); // id -> Sandbox, as last seen
  #prompts = new Map(); // id -> {text, last}: first prompt, or null while none as of last_event_id last
  #asking = new Set();
  #queue = [];
  #observer;
  #pending = { id: null, n: 0 }; // approvals waiting in the open sandbox
  selected = null;
  showDeleted = false;

  constructor(api, ul, options) {
    this.#api = api;
    this.#ul = ul;
    this.#o = { onDelete() {}, onRender() {}, ...options };
    this.#observer = new IntersectionObserver((entries) => {
      for (const e of entries) {
        if (e.isIntersecting) {
          this.want(e.target.dataset.sandboxId);
        }
      }
    });
  }

  get size() {
    return this.#sandboxes.size;
  }

  // deleted is how many deleted sandboxes the list holds.
  get deleted() {
    let n = 0;
    for (const sb of this.#sandboxes.values()) {
      n += sb.status === "deleted" ? 1 : 0;
    }
    return n;
  }

  get(id) {
    return this.#sandboxes.get(id);
  }

  // load reads every page of the list, as `sparkles sandbox list` does:
  // the API lists oldest first, and the newest belong on top.
  async load() {
    const seen = new Map();
    let after = "";
    for (;;) {
      const page = await this.#api.listSandboxes({ after, limit: PAGE });
      for (const sb of page.data) {
        // The open sandbox's stream may be ahead of the list answer.
        const old = this.#sandboxes.get(sb.id);
        const ahead = old && Number(old.last_event_id ?? 0) > Number(sb.last_event_id ?? 0);
        seen.set(sb.id, ahead ? old : { ...old, ...sb });
      }
      if (!page.has_more || page.data.length === 0) {
        break;
      }
      after = page.data.at(-1).id;
    }
    this.#sandboxes = seen;
    this.render();
  }

  // remember merges what the page learned of one sandbox.
  remember(sb) {
    this.#sandboxes.set(sb.id, { ...this.#sandboxes.get(sb.id), ...sb });
    this.render();
  }

  // sawEvent tells the list about an event of the open sandbox's stream:
  // a turn that starts or ends changes the row at once, and a first turn
  // names a sandbox that had none.
  sawEvent(env) {
    const sb = this.#sandboxes.get(env.sandbox_id);
    if (!sb) {
      return;
    }
    const change = { id: sb.id, last_event_id: env.id ?? sb.last_event_id, updated_at: env.ts ?? sb.updated_at };
    if (env.type === "turn.started") {
      this.sawPrompt(sb.id, env.data?.input);
      change.current_turn = { id: env.turn_id, status: "running", input: env.data?.input };
    } else if (env.type === "turn.completed" && (!sb.current_turn || sb.current_turn.id === env.turn_id)) {
      change.current_turn = null;
    } else if (env.type !== "turn.started" && env.type !== "turn.completed" && env.type !== "sandbox.error") {
      // Parts and tools change no row; only the time would, every 50 ms.
      this.#sandboxes.set(sb.id, { ...sb, ...change });
      return;
    }
    this.remember(change);
  }

  // sawPrompt names a sandbox that had no turn by the input of the turn the
  // page just started or saw start.
  sawPrompt(id, input) {
    const known = this.#prompts.get(id);
    if (known?.text === null && inputText(input)) {
      this.#prompts.set(id, { text: inputText(input) });
    }
  }

  // name is what the page calls a sandbox.
  name(id) {
    const sb = this.#sandboxes.get(id);
    if (!sb) {
      return id;
    }
    if (sb.metadata?.name) {
      return sb.metadata.name;
    }
    const p = this.#prompts.get(id);
    if (p?.text) {
      return truncate(p.text, NAME_MAX);
    }
    if (p?.text === null) {
      return "New sandbox";
    }
    const cur = inputText(sb.current_turn?.input);
    if (cur) {
      return truncate(cur, NAME_MAX);
    }
    return p ? `Sandbox ${sb.id.slice(-6)}` : "…";
  }

  // want looks up the first prompt of a sandbox whose row is in view, or
  // that is open.
  want(id) {
    const sb = this.#sandboxes.get(id);
    if (!sb || sb.metadata?.name || this.#asking.has(id)) {
      return;
    }
    const last = String(sb.last_event_id ?? 0);
    const p = this.#prompts.get(id);
    if (p && (p.text !== null || p.last === last)) {
      return; // known, or nothing new in its log since it had no turn
    }
    if (last === "0") {
      this.#prompts.set(id, { text: null, last }); // an empty log has no prompt
      this.#redraw(id);
      return;
    }
    this.#asking.add(id);
    this.#queue.push({ id, last });
    this.#pump();
  }

  #pump() {
    while (this.#queue.length > 0 && this.#asking.size - this.#queue.length < LOOKUPS) {
      const { id, last } = this.#queue.shift();
      firstTurnStart(this.#api, id)
        .then(({ started, turns }) => {
          // No turn.started but turns: retention took the first prompt, and
          // "" keeps the row from asking again.
          const text = started ? inputText(started.data?.input) : turns ? "" : null;
          if (!this.#prompts.get(id)?.text) {
            this.#prompts.set(id, { text, last });
          }
        })
        .catch(() => {
          // A failed lookup leaves the fallback name; the row asks again
          // when the sandbox's log has grown.
          this.#prompts.set(id, { text: null, last });
        })
        .finally(() => {
          this.#asking.delete(id);
          this.#redraw(id);
          this.#pump();
        });
    }
  }

  // #redraw renews the name of one row.
  #redraw(id) {
    const item = this.#ul.querySelector(`.sb-item[data-sandbox-id="${CSS.escape(id)}"]`);
    const name = item?.querySelector(".sb-name");
    if (name) {
      name.textContent = this.name(id);
      item.querySelector(".sb-link").title = this.#title(id);
    }
    this.#o.onRender();
  }

  #title(id) {
    const sb = this.#sandboxes.get(id);
    const p = this.#prompts.get(id)?.text;
    return [p && p !== this.name(id) ? p.trim().split("\n")[0].slice(0, 300) : "", sb?.id].filter(Boolean).join("\n");
  }

  // setPending tells the list how many approvals wait in the open sandbox
  // (only there does the page know), so that its row says what the header
  // says.
  setPending(id, n) {
    if (this.#pending.id === id && this.#pending.n === n) {
      return;
    }
    const before = this.#pending.id;
    this.#pending = { id, n };
    if (this.#sandboxes.has(id) || this.#sandboxes.has(before)) {
      this.render();
    }
  }

  // pending is how many approvals the list knows to wait in sandbox id.
  pending(id) {
    return this.#pending.id === id ? this.#pending.n : 0;
  }

  render() {
    // The list is rebuilt whole; keep the keyboard where it was.
    const focused = document.activeElement;
    const focusID = this.#ul.contains(focused) ? focused.closest(".sb-item")?.dataset.sandboxId : undefined;
    const focusClass = focused?.tagName === "BUTTON" ? "button" : "a";
    // Newest first: ids sort by creation time.
    const ids = [...this.#sandboxes.keys()].sort().reverse();
    const now = Date.now();
    const items = [];
    for (const id of ids) {
      const sb = this.#sandboxes.get(id);
      if (sb.status === "deleted" && !this.showDeleted && id !== this.selected) {
        continue;
      }
      const st = sandboxState(sb, this.pending(id));
      const when = sb.updated_at || sb.created_at;
      const link = h(
        "a",
        { class: "sb-link", href: `#/sandboxes/${encodeURIComponent(id)}`, "aria-current": id === this.selected ? "page" : null, title: this.#title(id) },
        h("span", { class: "sb-name", text: this.name(id) }),
        h("span", { class: `badge status-${st.key}`, text: st.label, title: st.long }),
        h(
          "span",
          { class: "sb-meta" },
          sb.agent ? `${sb.agent} · ` : "",
          h("time", { datetime: when, title: when ? new Date(when).toLocaleString() : null, text: when ? `active ${ago(when, now)}` : "" }),
        ),
      );
      const li = h("li", { class: "sb-item", "data-sandbox-id": id, "data-status": sb.status, "data-turn": sb.current_turn?.status ?? "" }, link);
      if (sb.status !== "deleted") {
        const del = h("button", { type: "button", class: "icon ghost", "aria-label": `Delete sandbox ${this.name(id)}`, title: "Delete", text: "✕" });
        del.addEventListener("click", () => this.#o.onDelete(id));
        li.append(del);
      }
      items.push(li);
    }
    if (items.length === 0) {
      const hidden = this.deleted;
      items.push(h("li", { class: "sb-none", text: hidden ? `No sandboxes but ${hidden} deleted.` : "No sandboxes yet." }));
    }
    this.#observer.disconnect();
    this.#ul.replaceChildren(...items);
    for (const li of this.#ul.querySelectorAll(".sb-item")) {
      this.#observer.observe(li);
    }
    if (focusID !== undefined) {
      const item = this.#ul.querySelector(`.sb-item[data-sandbox-id="${CSS.escape(focusID)}"]`);
      (item?.querySelector(focusClass) ?? item?.querySelector("a"))?.focus();
    }
    this.#o.onRender();
  }
}
