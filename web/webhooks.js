// webhooks.js is the console's view of the webhook endpoints (#/webhooks):
// each endpoint with its URL, events, sandbox filter, state and delivery
// figures, and, opened, its recent attempts with a Retry button per
// delivery and a switch to disable or enable it. Endpoints are created
// with the CLI or the API, which show the signing secret once; this view
// never sees a secret.
//
// Everything the API answers (URLs, descriptions, reasons, errors, the
// excerpts of receivers' answers) goes into the page as textContent, never
// as HTML: a receiver's answer is anyone's text.
import { APIError } from "./sparkles-events.js";
import { h } from "./dom.js";

// The view is read again this often while it is open and in view: the
// figures change with every delivery.
export const REFRESH_MS = 5000;

const STATES = {
  active: { label: "active", long: "active: deliveries go through" },
  failing: { label: "failing", long: "failing: the last attempt failed and a retry is due" },
  disabled: { label: "disabled", long: "disabled: nothing is delivered" },
};

// webhookState is what the page shows of an endpoint's state: {key, label,
// long}, key naming the badge's colour (status-<key>). A disabled endpoint
// says why when deliveries stopped on their own.
export function webhookState(wh) {
  const key = STATES[wh?.state] ? wh.state : "unknown";
  const st = STATES[key] ?? { label: wh?.state || "…", long: wh?.state || "" };
  if (key === "disabled" && wh.disabled_reason) {
    return { key, label: st.label, long: `disabled: ${wh.disabled_reason}` };
  }
  return { key, ...st };
}

// spanWords says a length of time in the largest unit that fits.
export function spanWords(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) {
    return `${s} s`;
  }
  const min = Math.round(s / 60);
  if (min < 60) {
    return `${min} min`;
  }
  const hours = Math.round(min / 60);
  if (hours < 48) {
    return `${hours} h`;
  }
  return `${Math.round(hours / 24)} days`;
}

// durationWords says how long an attempt took.
export function durationWords(ms) {
  if (ms === undefined || ms === null) {
    return "";
  }
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`;
}

// untilWords says when a retry is due, from now.
export function untilWords(t, now = Date.now()) {
  const ms = Date.parse(t) - now;
  if (!Number.isFinite(ms)) {
    return "";
  }
  return ms < 1000 ? "due now" : `in ${spanWords(ms)}`;
}

// eventsWords names the event types an endpoint receives.
export const eventsWords = (events) => (events?.length ? events.join(", ") : "the default events");

// filterWords says whose events an endpoint receives.
export const filterWords = (wh) => (wh.sandbox_id ? `sandbox ${wh.sandbox_id}` : "every sandbox");

// statsWords are an endpoint's figures as the page says them, one string
// each: delivered, failed, lag, and the age of the oldest event that
// waits.
export function statsWords(stats = {}, now = Date.now()) {
  const lag = Number(stats.lag ?? 0);
  const out = [`${stats.delivered ?? 0} delivered`, `${stats.failed ?? 0} failed`, lag === 0 ? "up to date" : `${lag} ${lag === 1 ? "event" : "events"} behind`];
  if (stats.oldest_undelivered_at) {
    const age = now - Date.parse(stats.oldest_undelivered_at);
    if (Number.isFinite(age)) {
      out.push(`oldest undelivered ${spanWords(age)} old`);
    }
  }
  return out;
}

// answerWords says what the receiver answered.
export const answerWords = (d) => (d.status_code ? String(d.status_code) : "no answer");

// attemptWords sums up one attempt in a line: how it went, of which event,
// the answer, how long it took, and when the next attempt is due.
export function attemptWords(d, now = Date.now()) {
  const failed = Boolean(d.error);
  const out = [failed ? "failed" : "delivered"];
  if (d.attempt > 1) {
    out[0] += ` (attempt ${d.attempt})`;
  }
  out.push(d.type, answerWords(d));
  if (d.duration_ms !== undefined) {
    out.push(durationWords(d.duration_ms));
  }
  if (failed) {
    out.push(d.error);
  }
  if (d.next_attempt_at) {
    out.push(`next attempt ${untilWords(d.next_attempt_at, now)}`);
  }
  return out.filter(Boolean);
}

// timeEl shows a time as the clock says it, the whole date when it is not
// today; the exact time is in its title and datetime.
function timeEl(t, cls, text) {
  const d = new Date(t);
  const ok = Number.isFinite(d.getTime());
  const today = ok && d.toDateString() === new Date().toDateString();
  return h("time", {
    class: cls,
    datetime: t,
    title: ok ? d.toLocaleString() : null,
    text: text ?? (ok ? (today ? d.toLocaleTimeString() : d.toLocaleString()) : ""),
  });
}

// newestPerDelivery are the ids of the attempts that are the newest of
// their delivery (the list is newest first): each delivery gets one Retry.
function newestPerDelivery(deliveries) {
  const seen = new Set();
  const out = new Set();
  for (const d of deliveries) {
    if (!seen.has(d.id)) {
      seen.add(d.id);
      out.add(d);
    }
  }
  return out;
}

const COLUMNS = ["Time", "Delivery", "Event", "Attempt", "Status", "Duration", "Error", "Next attempt", ""];

// renderDeliveries draws an endpoint's recent attempts as a table, newest
// first. busy(delivery) says whether a retry of it is under way. Its Retry
// buttons carry data-action="retry" in a row with data-delivery-id.
export function renderDeliveries(whID, deliveries, { now = Date.now(), busy = () => false } = {}) {
  if (deliveries === undefined) {
    return h("p", { class: "wh-none", text: "Loading the deliveries…" });
  }
  if (deliveries.length === 0) {
    return h("p", { class: "wh-none", text: "No deliveries yet (this server keeps its last 100 attempts in memory)." });
  }
  const newest = newestPerDelivery(deliveries);
  const head = h("tr", {}, ...COLUMNS.map((c) => h("th", { scope: "col", text: c })));
  const rows = deliveries.map((d) => {
    const failed = Boolean(d.error);
    const error = h("td", { class: "wh-error" }, d.error ?? "");
    if (failed && d.response) {
      error.append(h("span", { class: "wh-response", text: d.response }));
    }
    const action = h("td", {});
    if (newest.has(d)) {
      const retry = h("button", {
        type: "button",
        class: "wh-retry",
        "data-action": "retry",
        "data-focus": `retry:${whID}:${d.id}`,
        "aria-label": `Retry delivery ${d.id}`,
        disabled: busy(d.id),
        text: "Retry",
      });
      action.append(retry);
    }
    return h(
      "tr",
      { class: "wh-delivery", "data-delivery-id": d.id, "data-outcome": failed ? "failed" : "delivered" },
      h("td", {}, timeEl(d.at)),
      h("td", { class: "wh-delivery-id", text: d.id }),
      h("td", { title: `event ${d.event_id} of ${d.sandbox_id}`, text: d.type }),
      h("td", { class: "wh-num", text: String(d.attempt) }),
      h("td", { class: `wh-num wh-code ${failed ? "wh-bad" : "wh-ok"}`, text: answerWords(d) }),
      h("td", { class: "wh-num", text: durationWords(d.duration_ms) }),
      error,
      h("td", {}, d.next_attempt_at ? timeEl(d.next_attempt_at, undefined, untilWords(d.next_attempt_at, now)) : ""),
      action,
    );
  });
  return h("div", { class: "wh-scroll" }, h("table", { class: "wh-deliveries" }, h("thead", {}, head), h("tbody", {}, ...rows)));
}

// renderWebhook draws one endpoint: its head (a button that opens it, with
// the URL, and its state), what it receives, its figures and last attempt,
// and, when open, its switch and deliveries.
//
// o: open, deliveries (undefined while not read), now, busy(key). The
// buttons hold no handlers, so that a drawing can be merged into the last
// one (WebhookList): each names its action in data-action ("toggle",
// "enable" with data-enable the value to set, "retry"), in an item with
// data-webhook-id.
export function renderWebhook(wh, o = {}) {
  const { open = false, now = Date.now(), busy = () => false } = o;
  const st = webhookState(wh);
  // A disabled endpoint tries nothing again, whatever its attempts said.
  const attempt = (d) => (wh.enabled || !d ? d : { ...d, next_attempt_at: undefined });
  const detailID = `wh-detail-${wh.id}`;
  const expand = h(
    "button",
    { type: "button", class: "wh-expand", "data-action": "toggle", "aria-expanded": String(open), "aria-controls": detailID, "data-focus": `expand:${wh.id}`, title: wh.id },
    h("span", { class: "wh-chevron", "aria-hidden": "true", text: open ? "▾" : "▸" }),
    h("span", { class: "wh-url", text: wh.url }),
  );
  const head = h("div", { class: "wh-head" }, expand, h("span", { class: `badge status-${st.key}`, text: st.label, title: st.long }));

  const facts = h(
    "dl",
    { class: "wh-facts" },
    h("dt", { text: "Events" }),
    h("dd", { class: "wh-events", text: eventsWords(wh.events) }),
    h("dt", { text: "Sandboxes" }),
    h("dd", { class: "wh-filter", text: filterWords(wh) }),
  );
  if (wh.description) {
    facts.append(h("dt", { text: "Description" }), h("dd", { class: "wh-description", text: wh.description }));
  }
  const item = h("li", { class: "wh-item", "data-webhook-id": wh.id, "data-state": st.key }, head);
  if (st.key === "disabled" && wh.disabled_reason) {
    item.append(h("p", { class: "wh-reason", text: `Disabled: ${wh.disabled_reason}` }));
  }
  item.append(facts, h("p", { class: "wh-stats", text: statsWords(wh.stats, now).join(" · ") }));
  const last = attempt(wh.stats?.last_attempt);
  const lastLine = h("p", { class: "wh-last" }, h("span", { class: "wh-label", text: "Last attempt: " }));
  if (last) {
    lastLine.dataset.outcome = last.error ? "failed" : "delivered";
    lastLine.append(h("span", { class: "wh-last-words", text: attemptWords(last, now).join(" · ") }), " · ", timeEl(last.at));
  } else {
    lastLine.append(h("span", { class: "wh-last-words", text: "none yet" }));
  }
  item.append(lastLine);

  const detail = h("div", { class: "wh-detail", id: detailID, hidden: !open });
  if (open) {
    const enable = h("button", {
      type: "button",
      class: wh.enabled ? "wh-enable danger" : "wh-enable",
      "data-action": "enable",
      "data-enable": String(!wh.enabled),
      "data-focus": `enable:${wh.id}`,
      "aria-label": `${wh.enabled ? "Disable" : "Enable"} endpoint ${wh.url}`,
      disabled: busy(`enable:${wh.id}`),
      text: wh.enabled ? "Disable" : "Enable",
    });
    const hint = wh.enabled ? "Disabling stops deliveries; enabling resumes them from where they stopped." : "Enabling resumes the deliveries from where they stopped.";
    detail.append(
      h("div", { class: "wh-actions" }, enable, h("span", { class: "wh-hint", text: hint })),
      h("h3", { class: "wh-subtitle", text: "Recent attempts" }),
      renderDeliveries(wh.id, o.deliveries?.map(attempt), { now, busy: (d) => busy(`retry:${d}`) }),
    );
  }
  item.append(detail);
  return item;
}

// morph makes the node old look like el, keeping old and each of its
// descendants where el has a node of the same name and attributes; a node
// that differs is replaced, text is set in place. Elements carry no
// handlers (they are delegated), so a kept one behaves as the new would.
export function morph(old, el) {
  if (old.nodeName !== el.nodeName || (old.nodeType === 1 && !sameAttributes(old, el))) {
    old.replaceWith(el);
    return;
  }
  if (old.nodeType !== 1) {
    if (old.nodeValue !== el.nodeValue) {
      old.nodeValue = el.nodeValue;
    }
    return;
  }
  morphChildren(old, [...el.childNodes]);
}

// morphChildren makes the children of parent look like nodes.
export function morphChildren(parent, nodes) {
  const old = [...parent.childNodes];
  nodes.forEach((n, i) => (i < old.length ? morph(old[i], n) : parent.append(n)));
  for (const n of old.slice(nodes.length)) {
    n.remove();
  }
}

function sameAttributes(a, b) {
  if (a.attributes.length !== b.attributes.length) {
    return false;
  }
  for (const { name, value } of b.attributes) {
    if (a.getAttribute(name) !== value) {
      return false;
    }
  }
  return true;
}

// problemWords says why the list cannot be shown, for the answers that
// are not the token's fault or the network's.
export function problemWords(e) {
  if (e instanceof APIError && e.status === 404) {
    return "This server does not deliver webhooks.";
  }
  if (e instanceof APIError && e.status === 403) {
    return "Webhooks need the server's token; this token reads one sandbox only.";
  }
  return e?.message || String(e);
}

// WebhookList keeps the endpoints as last read and renders them into ul;
// it reads them again every REFRESH_MS while open and in view, with the
// deliveries of every endpoint that is open.
//
// Options: status(text) shows what the view is doing or why it failed;
// announce(text) tells a screen reader of an outcome; onError(e) is told
// of a failure first and returns true when it dealt with it (a token the
// server refuses).
export class WebhookList {
  #api;
  #ul;
  #o;
  #webhooks = null; // the last list read, null before the first
  #open = new Set(); // endpoint ids whose deliveries show
  #deliveries = new Map(); // endpoint id -> deliveries, newest first
  #busy = new Set(); // "enable:<id>", "retry:<delivery>" under way
  #timer = 0;
  #loading = null;
  #loadFailed = false; // the status says why the last load failed
  #changes = 0; // counts the page's own changes: a read begun before one is stale
  shown = false;

  constructor(api, ul, options = {}) {
    this.#api = api;
    this.#ul = ul;
    this.#o = { status() {}, announce() {}, onError: () => false, ...options };
    ul.addEventListener("click", (ev) => this.#click(ev));
    document.addEventListener("visibilitychange", () => {
      if (this.shown && document.visibilityState === "visible") {
        this.load();
      }
    });
  }

  // show starts reading the list, now and every REFRESH_MS.
  show() {
    if (this.shown) {
      return;
    }
    this.shown = true;
    this.load();
    this.#timer = setInterval(() => document.visibilityState === "visible" && this.load(), REFRESH_MS);
  }

  // hide stops the reading; what was read stays for the next show.
  hide() {
    this.shown = false;
    clearInterval(this.#timer);
    this.#timer = 0;
  }

  // load reads the list and the deliveries of the open endpoints; a load
  // under way is joined, not doubled.
  load() {
    this.#loading ??= this.#load().finally(() => {
      this.#loading = null;
    });
    return this.#loading;
  }

  // reload reads everything again after a change: a load under way may
  // have been answered before it.
  async reload() {
    this.#changes++;
    await this.#loading;
    return this.load();
  }

  async #load() {
    const first = this.#webhooks === null;
    if (first) {
      this.#o.status("Loading the webhook endpoints…");
    }
    const changes = this.#changes;
    try {
      const page = await this.#api.webhooks();
      const list = page.data ?? [];
      const ids = new Set(list.map((w) => w.id));
      const open = [...this.#open].filter((id) => ids.has(id));
      const deliveries = await Promise.all(open.map((id) => this.#api.webhookDeliveries(id)));
      if (changes !== this.#changes) {
        return; // begun before a change the page made: stale
      }
      this.#webhooks = list;
      for (const id of this.#open) {
        if (!ids.has(id)) {
          this.#open.delete(id);
          this.#deliveries.delete(id);
        }
      }
      open.forEach((id, i) => this.#deliveries.set(id, deliveries[i].data ?? []));
      if (this.#loadFailed || first) {
        this.#o.status("");
      }
      this.#loadFailed = false;
    } catch (e) {
      this.#loadFailed = !this.#fail(e);
    }
    this.render();
  }

  async #readDeliveries(id) {
    const page = await this.#api.webhookDeliveries(id);
    this.#deliveries.set(id, page.data ?? []);
  }

  // #fail shows why a call failed, and reports whether the page took
  // care of it instead (a refused token).
  #fail(e) {
    if (this.#o.onError(e)) {
      return true;
    }
    this.#o.status(problemWords(e));
    return false;
  }

  // #click runs the action of the button clicked (renderWebhook).
  #click(ev) {
    const button = ev.target.closest("button[data-action]");
    const id = button?.closest(".wh-item")?.dataset.webhookId;
    if (!id || button.disabled) {
      return;
    }
    const action = button.dataset.action;
    if (action === "toggle") {
      this.#toggle(id);
    } else if (action === "enable") {
      this.#enable(id, button.dataset.enable === "true");
    } else if (action === "retry") {
      this.#retry(id, button.closest(".wh-delivery").dataset.deliveryId);
    }
  }

  async #toggle(id) {
    if (this.#open.delete(id)) {
      this.render();
      return;
    }
    this.#open.add(id);
    this.render();
    try {
      await this.#readDeliveries(id);
    } catch (e) {
      this.#fail(e);
    }
    this.render();
  }

  async #enable(id, enabled) {
    const key = `enable:${id}`;
    this.#busy.add(key);
    this.render();
    try {
      const got = await this.#api.updateWebhook(id, { enabled });
      this.#changes++;
      this.#webhooks = this.#webhooks.map((w) => (w.id === got.id ? got : w));
      this.#o.status("");
      this.#o.announce(`Endpoint ${enabled ? "enabled" : "disabled"}.`);
    } catch (e) {
      this.#fail(e);
    } finally {
      this.#busy.delete(key);
    }
    this.render();
  }

  async #retry(id, delivery) {
    const key = `retry:${delivery}`;
    this.#busy.add(key);
    this.render();
    try {
      const d = await this.#api.retryDelivery(id, delivery);
      this.#o.status("");
      this.#o.announce(`Retried ${delivery}: ${attemptWords(d).slice(0, 3).join(" · ")}.`);
    } catch (e) {
      this.#fail(e);
    } finally {
      this.#busy.delete(key);
    }
    // The attempt changed the figures and the log: read both.
    await this.reload();
  }

  render() {
    if (this.#webhooks === null) {
      return;
    }
    // The list is drawn anew and merged into the page's (morph), so that
    // a refresh keeps every element that stayed the same: the keyboard
    // stays where it was and a click under way is not lost. Where an
    // element was replaced, the keyboard goes back to its successor.
    const focus = this.#ul.contains(document.activeElement) ? document.activeElement.dataset?.focus : undefined;
    const now = Date.now();
    const busy = (key) => this.#busy.has(key);
    const items = this.#webhooks.map((wh) =>
      renderWebhook(wh, {
        open: this.#open.has(wh.id),
        deliveries: this.#deliveries.get(wh.id),
        now,
        busy,
      }),
    );
    if (items.length === 0) {
      items.push(
        h(
          "li",
          { class: "wh-none" },
          "No webhook endpoints yet. Create one with ",
          h("code", { text: "sparkles webhooks create URL" }),
          " or ",
          h("code", { text: "POST /v1/webhooks" }),
          "; it shows here with its deliveries.",
        ),
      );
    }
    morphChildren(this.#ul, items);
    if (focus && !this.#ul.contains(document.activeElement)) {
      this.#ul.querySelector(`[data-focus="${CSS.escape(focus)}"]`)?.focus();
    }
  }
}
