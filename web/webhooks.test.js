// Unit tests of the console's webhooks view: the words of an endpoint's
// state, figures and attempts, and what renderWebhook and renderDeliveries
// draw, on a small stand-in for the DOM that refuses HTML. Run with
// `node --test web/` (TestNodeUnits runs them from go test).
import assert from "node:assert/strict";
import { test } from "node:test";

import { APIError } from "./sparkles-events.js";
import {
  attemptWords,
  durationWords,
  problemWords,
  renderDeliveries,
  renderWebhook,
  spanWords,
  WebhookList,
  statsWords,
  untilWords,
  webhookState,
} from "./webhooks.js";

// FakeText and FakeElement are as much of the DOM as dom.js's h and the
// view use. Setting innerHTML or outerHTML throws: the view must build
// every node.
class FakeNode {
  parentNode = null;
  replaceWith(n) {
    const siblings = this.parentNode.childNodes;
    n.parentNode?.removeChild(n);
    siblings[siblings.indexOf(this)] = n;
    n.parentNode = this.parentNode;
    this.parentNode = null;
  }
  remove() {
    this.parentNode?.removeChild(this);
  }
}

class FakeText extends FakeNode {
  nodeType = 3;
  nodeName = "#text";
  constructor(v) {
    super();
    this.nodeValue = String(v);
  }
  get textContent() {
    return this.nodeValue;
  }
}

const camel = (name) => name.replace(/-([a-z])/g, (_, c) => c.toUpperCase());
const kebab = (key) => key.replace(/[A-Z]/g, (c) => "-" + c.toLowerCase());

class FakeElement extends FakeNode {
  nodeType = 1;
  constructor(tag) {
    super();
    this.nodeName = this.tagName = tag.toUpperCase();
    this.childNodes = [];
    this.attrs = new Map();
    this.listeners = {};
    this.dataset = new Proxy(
      {},
      {
        get: (_, k) => this.getAttribute("data-" + kebab(String(k))) ?? undefined,
        set: (_, k, v) => {
          this.setAttribute("data-" + kebab(String(k)), v);
          return true;
        },
      },
    );
  }
  get attributes() {
    return [...this.attrs].map(([name, value]) => ({ name, value }));
  }
  setAttribute(k, v) {
    this.attrs.set(k, String(v));
  }
  getAttribute(k) {
    return this.attrs.get(k) ?? null;
  }
  get className() {
    return this.getAttribute("class") ?? "";
  }
  set className(v) {
    this.setAttribute("class", v);
  }
  get hidden() {
    return this.attrs.has("hidden");
  }
  set hidden(v) {
    if (v) {
      this.setAttribute("hidden", "");
    } else {
      this.attrs.delete("hidden");
    }
  }
  get disabled() {
    return this.attrs.has("disabled");
  }
  get textContent() {
    return this.childNodes.map((c) => c.textContent).join("");
  }
  set textContent(v) {
    this.childNodes = [];
    this.append(String(v));
  }
  set innerHTML(_) {
    throw new Error("innerHTML set");
  }
  set outerHTML(_) {
    throw new Error("outerHTML set");
  }
  insertAdjacentHTML() {
    throw new Error("insertAdjacentHTML called");
  }
  append(...nodes) {
    for (let n of nodes) {
      if (typeof n === "string") {
        n = new FakeText(n);
      }
      n.parentNode?.removeChild(n);
      n.parentNode = this;
      this.childNodes.push(n);
    }
  }
  removeChild(n) {
    this.childNodes = this.childNodes.filter((c) => c !== n);
    n.parentNode = null;
  }
  contains(n) {
    for (; n; n = n.parentNode) {
      if (n === this) {
        return true;
      }
    }
    return false;
  }
  // matches knows the selectors the view uses: tag, .class, [attr].
  matches(sel) {
    const m = /^(\w*)(?:\.([\w-]+))?(?:\[([\w-]+)\])?$/.exec(sel);
    return Boolean(m) && (!m[1] || this.tagName === m[1].toUpperCase()) && (!m[2] || this.className.split(" ").includes(m[2])) && (!m[3] || this.attrs.has(m[3]));
  }
  closest(sel) {
    for (let e = this; e; e = e.parentNode) {
      if (e.matches(sel)) {
        return e;
      }
    }
    return null;
  }
  addEventListener(type, fn) {
    (this.listeners[type] ??= []).push(fn);
  }
  // click bubbles, as a user's click does.
  click() {
    for (let e = this; e; e = e.parentNode) {
      for (const fn of e.listeners.click ?? []) {
        fn({ target: this });
      }
    }
  }
  get children() {
    return this.childNodes.filter((c) => c.nodeType === 1);
  }
  // all lists this element and its descendant elements, depth first.
  all() {
    return [this, ...this.children.flatMap((c) => c.all())];
  }
  // find returns the descendants whose class names include cls.
  find(cls) {
    return this.all().filter((e) => e.className.split(" ").includes(cls));
  }
  one(cls) {
    const got = this.find(cls);
    assert.equal(got.length, 1, `one .${cls}, found ${got.length}`);
    return got[0];
  }
  byTag(tag) {
    return this.all().filter((e) => e.tagName === tag.toUpperCase());
  }
}

globalThis.document = { createElement: (tag) => new FakeElement(tag), addEventListener() {}, activeElement: null, visibilityState: "visible" };

const NOW = Date.parse("2025-06-01T12:00:00Z");
const iso = (msFromNow) => new Date(NOW + msFromNow).toISOString();

function endpoint(over = {}) {
  return {
    object: "webhook",
    id: "wh_01",
    url: "https://hooks.example/sparkles",
    events: ["turn.completed", "approval.requested", "sandbox.error"],
    enabled: true,
    state: "active",
    created_at: iso(-3600e3),
    stats: { delivered: 12, failed: 1, lag: 0 },
    ...over,
  };
}

function attempt(over = {}) {
  return {
    object: "webhook_delivery",
    id: "wh_01_sb_01_42",
    sandbox_id: "sb_01",
    event_id: "42",
    type: "turn.completed",
    attempt: 1,
    at: iso(-5000),
    status_code: 200,
    duration_ms: 35,
    ...over,
  };
}

test("webhookState: green, amber and red, and the reason of a disable", () => {
  assert.deepEqual(
    ["active", "failing", "disabled"].map((state) => webhookState(endpoint({ state })).key),
    ["active", "failing", "disabled"],
  );
  const off = webhookState(endpoint({ state: "disabled", enabled: false, disabled_reason: "event 42 failed for 72h" }));
  assert.equal(off.label, "disabled");
  assert.equal(off.long, "disabled: event 42 failed for 72h");
  // A state this page does not know is shown as the server says it.
  assert.deepEqual(webhookState(endpoint({ state: "paused" })), { key: "unknown", label: "paused", long: "paused" });
});

test("spanWords, durationWords, untilWords", () => {
  assert.deepEqual([0, 12e3, 90e3, 3 * 3600e3, 72 * 3600e3].map(spanWords), ["0 s", "12 s", "2 min", "3 h", "3 days"]);
  assert.deepEqual([35, 1250, undefined].map(durationWords), ["35 ms", "1.3 s", ""]);
  assert.equal(untilWords(iso(40e3), NOW), "in 40 s");
  assert.equal(untilWords(iso(-5e3), NOW), "due now");
  assert.equal(untilWords("not a time", NOW), "");
});

test("statsWords: delivered, failed, lag and the oldest undelivered event's age", () => {
  assert.deepEqual(statsWords({ delivered: 12, failed: 0, lag: 0 }, NOW), ["12 delivered", "0 failed", "up to date"]);
  assert.deepEqual(statsWords({ delivered: 3, failed: 2, lag: 1, oldest_undelivered_at: iso(-240e3) }, NOW), [
    "3 delivered",
    "2 failed",
    "1 event behind",
    "oldest undelivered 4 min old",
  ]);
  assert.deepEqual(statsWords(undefined, NOW), ["0 delivered", "0 failed", "up to date"]);
  assert.equal(statsWords({ lag: 7 }, NOW)[2], "7 events behind");
});

test("attemptWords: how it went, the answer, how long, the next attempt", () => {
  assert.deepEqual(attemptWords(attempt(), NOW), ["delivered", "turn.completed", "200", "35 ms"]);
  const failed = attempt({ attempt: 3, status_code: 0, duration_ms: 10000, error: "connect: connection refused", next_attempt_at: iso(20e3) });
  assert.deepEqual(attemptWords(failed, NOW), ["failed (attempt 3)", "turn.completed", "no answer", "10.0 s", "connect: connection refused", "next attempt in 20 s"]);
});

test("problemWords: a server without webhooks, a sandbox's token", () => {
  assert.equal(problemWords(new APIError(404, "not_found", "no such route")), "This server does not deliver webhooks.");
  assert.match(problemWords(new APIError(403, "forbidden", "")), /server's token/);
  assert.equal(problemWords(new APIError(500, "internal", "internal error")), "internal error");
});

test("renderWebhook: an endpoint closed shows what it receives, its state and last attempt", () => {
  const wh = endpoint({ sandbox_id: "sb_01", description: "chat bot", stats: { delivered: 12, failed: 1, lag: 2, last_attempt: attempt() } });
  const li = renderWebhook(wh, { now: NOW });
  assert.equal(li.getAttribute("data-webhook-id"), "wh_01");
  assert.equal(li.getAttribute("data-state"), "active");
  assert.equal(li.one("wh-url").textContent, "https://hooks.example/sparkles");
  assert.equal(li.one("badge").className, "badge status-active");
  assert.equal(li.one("badge").textContent, "active");
  assert.equal(li.one("wh-events").textContent, "turn.completed, approval.requested, sandbox.error");
  assert.equal(li.one("wh-filter").textContent, "sandbox sb_01");
  assert.equal(li.one("wh-description").textContent, "chat bot");
  assert.equal(li.one("wh-stats").textContent, "12 delivered · 1 failed · 2 events behind");
  assert.equal(li.one("wh-last-words").textContent, "delivered · turn.completed · 200 · 35 ms");
  assert.equal(li.one("wh-last").byTag("time")[0].getAttribute("datetime"), wh.stats.last_attempt.at);
  const expand = li.one("wh-expand");
  assert.equal(expand.getAttribute("aria-expanded"), "false");
  assert.equal(expand.getAttribute("aria-controls"), li.one("wh-detail").getAttribute("id"));
  assert.equal(li.one("wh-detail").hidden, true);
  assert.equal(li.find("wh-enable").length, 0);
  assert.equal(li.find("wh-reason").length, 0);
});

test("renderWebhook: every sandbox, no attempt yet, no description", () => {
  const li = renderWebhook(endpoint(), { now: NOW });
  assert.equal(li.one("wh-filter").textContent, "every sandbox");
  assert.equal(li.one("wh-last-words").textContent, "none yet");
  assert.equal(li.find("wh-description").length, 0);
});

test("renderWebhook: a disabled endpoint is red and says why; open, it offers Enable", () => {
  const wh = endpoint({ state: "disabled", enabled: false, disabled_reason: "event 42 of sb_01 failed for 72h0m0s" });
  const li = renderWebhook(wh, { open: true, deliveries: [], now: NOW });
  assert.equal(li.getAttribute("data-state"), "disabled");
  assert.equal(li.one("badge").className, "badge status-disabled");
  assert.equal(li.one("badge").getAttribute("title"), "disabled: event 42 of sb_01 failed for 72h0m0s");
  assert.equal(li.one("wh-reason").textContent, "Disabled: event 42 of sb_01 failed for 72h0m0s");
  assert.equal(li.one("wh-expand").getAttribute("aria-expanded"), "true");
  assert.equal(li.one("wh-detail").hidden, false);
  const enable = li.one("wh-enable");
  assert.equal(enable.textContent, "Enable");
  assert.equal(enable.getAttribute("aria-label"), "Enable endpoint https://hooks.example/sparkles");
  assert.equal(enable.dataset.action, "enable");
  assert.equal(enable.dataset.enable, "true");
  assert.equal(li.one("wh-expand").dataset.action, "toggle");
  assert.match(li.one("wh-none").textContent, /No deliveries yet/);
  // Its last failure's retry will not come.
  const failed = attempt({ error: "status 500", status_code: 500, next_attempt_at: iso(30e3) });
  const off = renderWebhook({ ...wh, stats: { failed: 1, lag: 0, last_attempt: failed } }, { open: true, deliveries: [failed], now: NOW });
  assert.doesNotMatch(off.one("wh-last-words").textContent, /next attempt/);
  assert.equal(off.one("wh-delivery").byTag("td")[7].textContent, "");
});

test("renderWebhook: an enabled endpoint open offers Disable, disabled while the change is under way", () => {
  const li = renderWebhook(endpoint({ state: "failing" }), { open: true, now: NOW, busy: (k) => k === "enable:wh_01" });
  assert.equal(li.one("badge").className, "badge status-failing");
  const enable = li.one("wh-enable");
  assert.equal(enable.textContent, "Disable");
  assert.equal(enable.getAttribute("disabled"), "");
  assert.equal(enable.dataset.enable, "false");
  // Deliveries not read yet.
  assert.equal(li.one("wh-none").textContent, "Loading the deliveries…");
});

test("renderDeliveries: one row per attempt, newest first, one Retry per delivery", () => {
  const rows = [
    attempt({ id: "wh_01_sb_01_43", event_id: "43", attempt: 2, at: iso(-1000), status_code: 500, duration_ms: 12, error: "status 500", response: "oops", next_attempt_at: iso(10e3) }),
    attempt({ id: "wh_01_sb_01_43", event_id: "43", attempt: 1, at: iso(-6000), status_code: 500, duration_ms: 9, error: "status 500", next_attempt_at: iso(-1000) }),
    attempt(),
  ];
  const table = renderDeliveries("wh_01", rows, { now: NOW, busy: (d) => d === "wh_01_sb_01_42" });
  assert.deepEqual(
    table.byTag("th").map((th) => th.textContent),
    ["Time", "Delivery", "Event", "Attempt", "Status", "Duration", "Error", "Next attempt", ""],
  );
  const trs = table.find("wh-delivery");
  assert.equal(trs.length, 3);
  const cells = (tr) => tr.byTag("td").map((td) => td.textContent);
  assert.deepEqual(cells(trs[0]).slice(1), ["wh_01_sb_01_43", "turn.completed", "2", "500", "12 ms", "status 500oops", "in 10 s", "Retry"]);
  assert.equal(trs[0].getAttribute("data-outcome"), "failed");
  assert.equal(trs[0].byTag("time")[0].getAttribute("datetime"), rows[0].at);
  assert.equal(trs[0].one("wh-response").textContent, "oops");
  assert.deepEqual(cells(trs[1]).slice(1), ["wh_01_sb_01_43", "turn.completed", "1", "500", "9 ms", "status 500", "due now", ""]);
  assert.deepEqual(cells(trs[2]).slice(1), ["wh_01_sb_01_42", "turn.completed", "1", "200", "35 ms", "", "", "Retry"]);
  assert.equal(trs[2].getAttribute("data-outcome"), "delivered");
  const retries = table.find("wh-retry");
  assert.equal(retries.length, 2);
  assert.equal(retries[0].getAttribute("aria-label"), "Retry delivery wh_01_sb_01_43");
  assert.equal(retries[0].getAttribute("disabled"), null);
  assert.equal(retries[1].getAttribute("disabled"), "", "a retry under way disables its button");
  assert.equal(retries[0].dataset.action, "retry");
  assert.equal(retries[0].closest("tr").dataset.deliveryId, "wh_01_sb_01_43");
});

test("renderWebhook: what the API answers is set as text, never as HTML", () => {
  const html = `<img src=x onerror="alert(1)"><b>bold</b>`;
  const wh = endpoint({
    url: `https://hooks.example/${html}`,
    description: html,
    sandbox_id: html,
    events: [html],
    state: "disabled",
    enabled: false,
    disabled_reason: html,
    stats: { delivered: 0, failed: 1, lag: 0, last_attempt: attempt({ type: html, error: html, response: html, status_code: 500 }) },
  });
  const deliveries = [attempt({ id: html, type: html, error: html, response: html, status_code: 500 })];
  // The stand-in throws on innerHTML: rendering succeeds only by text.
  const li = renderWebhook(wh, { open: true, deliveries, now: NOW });
  const tags = new Set(li.all().map((e) => e.tagName));
  assert.ok(!tags.has("IMG") && !tags.has("B"), `no element of the API's text: ${[...tags]}`);
  const texts = li.all().flatMap((e) => e.childNodes.filter((c) => c.nodeType === 3).map((c) => c.nodeValue));
  for (const want of [`https://hooks.example/${html}`, html, `Disabled: ${html}`, `sandbox ${html}`]) {
    assert.ok(texts.includes(want), `the text ${JSON.stringify(want)} is set as it is`);
  }
});

// deferred is a promise and the functions that settle it.
function deferred() {
  let resolve;
  const promise = new Promise((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

test("WebhookList: a list read before the page's own change does not undo it", async () => {
  const answers = [];
  const api = {
    webhooks: () => {
      const d = deferred();
      answers.push(d);
      return d.promise;
    },
    updateWebhook: async (id, patch) => endpoint({ id, enabled: patch.enabled, state: patch.enabled ? "active" : "disabled" }),
    webhookDeliveries: async () => ({ object: "list", data: [] }),
  };
  const ul = new FakeElement("ul");
  const view = new WebhookList(api, ul);
  const first = view.load();
  answers[0].resolve({ object: "list", data: [endpoint()] });
  await first;
  assert.equal(ul.one("badge").textContent, "active");

  // A read begins; the user disables the endpoint before it is answered.
  const stale = view.load();
  ul.one("wh-expand").click(); // open it, for its switch
  await new Promise((r) => setImmediate(r));
  ul.one("wh-enable").click();
  await new Promise((r) => setImmediate(r));
  assert.equal(ul.one("badge").textContent, "disabled");
  answers[1].resolve({ object: "list", data: [endpoint()] });
  await stale;
  assert.equal(ul.one("badge").textContent, "disabled", "the stale answer is dropped");

  // The next read is the server's word again.
  const next = view.load();
  answers[2].resolve({ object: "list", data: [endpoint({ state: "failing" })] });
  await next;
  assert.equal(ul.one("badge").textContent, "failing");
});

test("WebhookList: a refresh keeps every element that stayed the same", async () => {
  let hooks = [endpoint(), endpoint({ id: "wh_02", url: "https://two.example/" })];
  const api = { webhooks: async () => ({ object: "list", data: hooks }) };
  const ul = new FakeElement("ul");
  const view = new WebhookList(api, ul);
  await view.load();
  const [one, two] = ul.children;
  const expand = two.one("wh-expand");

  // New figures: the item and its button stay, the text follows.
  hooks = [hooks[0], endpoint({ id: "wh_02", url: "https://two.example/", stats: { delivered: 13, failed: 1, lag: 0 } })];
  await view.load();
  assert.deepEqual(ul.children, [one, two]);
  assert.equal(two.one("wh-expand"), expand, "a button under the pointer is not replaced");
  assert.equal(two.one("wh-stats").textContent, "13 delivered · 1 failed · up to date");

  // A new state: the item's own attributes differ, so it is replaced.
  hooks = [hooks[0], endpoint({ id: "wh_02", url: "https://two.example/", state: "failing" })];
  await view.load();
  assert.equal(ul.children[0], one);
  assert.notEqual(ul.children[1], two);
  assert.equal(ul.children[1].one("badge").textContent, "failing");

  hooks = [];
  await view.load();
  assert.deepEqual(
    ul.children.map((li) => li.className),
    ["wh-none"],
  );
});
