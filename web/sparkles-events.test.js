// Tests of sparkles-events.js under node's test runner: node --test web/
import { test } from "node:test";
import assert from "node:assert/strict";

import { SSEParser, SandboxEventStream, APIError, State } from "./sparkles-events.js";

const utf8 = new TextEncoder();

// parseWhole feeds a stream in one piece.
function parseWhole(bytes) {
  const p = new SSEParser();
  return [...p.feed(bytes), ...p.end()];
}

// parseSplits feeds the stream as chunks cut at the given byte offsets.
function parseSplits(bytes, cuts) {
  const p = new SSEParser();
  const out = [];
  let from = 0;
  for (const c of [...cuts, bytes.length]) {
    out.push(...p.feed(bytes.subarray(from, c)));
    from = c;
  }
  out.push(...p.end());
  return out;
}

// checkEverySplit checks that the stream parses to want whole, cut in two
// at every byte offset, cut in three at every pair of offsets (for short
// streams), and fed one byte at a time.
function checkEverySplit(stream, want) {
  const bytes = typeof stream === "string" ? utf8.encode(stream) : stream;
  assert.deepEqual(parseWhole(bytes), want, "whole");
  for (let i = 0; i <= bytes.length; i++) {
    assert.deepEqual(parseSplits(bytes, [i]), want, `cut at ${i}`);
  }
  if (bytes.length <= 80) {
    for (let i = 0; i <= bytes.length; i++) {
      for (let j = i; j <= bytes.length; j++) {
        assert.deepEqual(parseSplits(bytes, [i, j]), want, `cut at ${i} and ${j}`);
      }
    }
  }
  const bytewise = Array.from({ length: bytes.length }, (_, i) => i + 1);
  assert.deepEqual(parseSplits(bytes, bytewise), want, "one byte at a time");
}

const msg = (data, { type = "message", id = null, lastEventId = "" } = {}) => ({ type, data, id, lastEventId });

test("SSEParser", async (t) => {
  await t.test("LF", () => {
    checkEverySplit("data: one\n\ndata: two\n\n", [msg("one"), msg("two")]);
  });
  await t.test("CR", () => {
    checkEverySplit("data: one\r\rdata: two\r\r", [msg("one"), msg("two")]);
  });
  await t.test("CRLF", () => {
    checkEverySplit("data: one\r\n\r\ndata: two\r\n\r\n", [msg("one"), msg("two")]);
  });
  await t.test("MixedLineEnds", () => {
    checkEverySplit("data: a\r\ndata: b\rdata: c\n\r\nevent: x\rdata: d\n\r", [msg("a\nb\nc"), msg("d", { type: "x" })]);
  });
  await t.test("CRThenLFIsOneBreak", () => {
    // A CR at the end of a chunk and an LF at the start of the next are one
    // line break, not a blank line that would dispatch early.
    const p = new SSEParser();
    assert.deepEqual(p.feed("data: a\r"), []);
    assert.deepEqual(p.feed("\ndata: b\r"), []);
    assert.deepEqual(p.feed("\n\r\n"), [msg("a\nb")]);
  });
  await t.test("Comments", () => {
    const comments = [];
    const p = new SSEParser({ onComment: (c) => comments.push(c) });
    const got = [...p.feed(": ping\n\n:\ndata: x\n: inside\n\n"), ...p.end()];
    assert.deepEqual(got, [msg("x")]);
    assert.deepEqual(comments, ["ping", "", "inside"]);
    checkEverySplit(": ping\n\ndata: x\n:c\n\n", [msg("x")]);
  });
  await t.test("MultiLineData", () => {
    checkEverySplit("data: {\"a\":\ndata:  1}\ndata\ndata:\n\n", [msg('{"a":\n 1}\n\n')]);
  });
  await t.test("IDAndEvent", () => {
    checkEverySplit("id: 7\nevent: message.updated\ndata: {}\n\nevent: snapshot\ndata: s\n\nid: 8\ndata: t\n\n", [
      msg("{}", { type: "message.updated", id: "7", lastEventId: "7" }),
      // No id line: the message keeps the stream's last id, as EventSource does.
      msg("s", { type: "snapshot", lastEventId: "7" }),
      msg("t", { id: "8", lastEventId: "8" }),
    ]);
  });
  await t.test("IDResetAndNUL", () => {
    checkEverySplit("id: 5\ndata: a\n\nid: 6\u0000\ndata: b\n\nid\ndata: c\n\n", [
      msg("a", { id: "5", lastEventId: "5" }),
      msg("b", { lastEventId: "5" }),
      msg("c", { id: "", lastEventId: "" }),
    ]);
  });
  await t.test("RetryIgnored", () => {
    checkEverySplit("retry: 10\ndata: a\n\nretry: x\n\n", [msg("a")]);
  });
  await t.test("UnknownFieldsIgnored", () => {
    checkEverySplit("foo: bar\ndata: a\nDATA: b\n\n", [msg("a")]);
  });
  await t.test("OneLeadingSpaceStripped", () => {
    checkEverySplit("data:a\n\ndata:  b\n\nevent:  c\ndata\n\n", [msg("a"), msg(" b"), msg("", { type: " c" })]);
  });
  await t.test("NoDataNoMessage", () => {
    checkEverySplit("event: x\n\nid: 3\n\n\n\ndata: y\n\n", [msg("y", { lastEventId: "3" })]);
  });
  await t.test("UnfinishedMessageDropped", () => {
    checkEverySplit("data: a\n\ndata: b\n", [msg("a")]);
    checkEverySplit("data: a\n\ndata: b", [msg("a")]);
  });
  await t.test("BOM", () => {
    const body = "data: a\n\n";
    checkEverySplit(Uint8Array.from([0xef, 0xbb, 0xbf, ...utf8.encode(body)]), [msg("a")]);
    // Only a leading BOM is stripped; a second one is data.
    checkEverySplit(Uint8Array.from([0xef, 0xbb, 0xbf, ...utf8.encode("data: \ufeffb\n\n")]), [msg("\ufeffb")]);
    const p = new SSEParser();
    assert.deepEqual([...p.feed("\ufeffdata: s\n\n"), ...p.end()], [msg("s")]);
  });
  await t.test("UTF8", () => {
    // Two-, three- and four-byte characters, split at every byte.
    const text = "héllo — 你好 😀 «ok»";
    checkEverySplit(`id: 1\ndata: ${text}\n\n`, [msg(text, { id: "1", lastEventId: "1" })]);
  });
  await t.test("InvalidUTF8Replaced", () => {
    checkEverySplit(Uint8Array.from([...utf8.encode("data: a"), 0xff, ...utf8.encode("\n\n")]), [msg("a\ufffd")]);
  });
  await t.test("LongLines", () => {
    const big = "x".repeat(300000);
    const p = new SSEParser();
    const out = [];
    const bytes = utf8.encode(`data: ${big}\n\n`);
    for (let i = 0; i < bytes.length; i += 1000) {
      out.push(...p.feed(bytes.subarray(i, i + 1000)));
    }
    assert.equal(out.length, 1);
    assert.equal(out[0].data, big);
  });
  await t.test("ErrTooLarge", () => {
    const p = new SSEParser({ maxBytes: 10 });
    assert.throws(() => p.feed("data: 0123456789abc"), /longer than 10/);
    const q = new SSEParser({ maxBytes: 10 });
    assert.throws(() => q.feed("data: 012345\ndata: 6789ab\n"), /larger than 10/);
  });
});

// A fake server for SandboxEventStream: each fetch is answered by the next
// handler of a script, and recorded.
class FakeServer {
  constructor() {
    this.requests = [];
    this.handlers = [];
    this.waiters = [];
  }

  // on queues the answer to the next request.
  on(handler) {
    this.handlers.push(handler);
    return this;
  }

  fetch = async (url, init = {}) => {
    const req = { url: new URL(url, "http://sparkles.test"), headers: init.headers ?? {}, signal: init.signal };
    this.requests.push(req);
    for (const w of this.waiters.splice(0)) {
      w();
    }
    const h = this.handlers.shift();
    if (!h) {
      // Nothing scripted: hang until the reader gives up on this request.
      return new Promise((_, reject) => {
        init.signal?.addEventListener("abort", () => reject(init.signal.reason));
      });
    }
    return h(req);
  };

  // requested resolves once n requests were made.
  async requested(n) {
    while (this.requests.length < n) {
      await new Promise((r) => this.waiters.push(r));
    }
    return this.requests[n - 1];
  }
}

const envelope = (id, type, data = {}, turn = "turn_1") => ({
  id: id === null ? null : String(id),
  object: "sandbox.event",
  version: "v1",
  type,
  ts: "2026-08-06T12:00:00.000Z",
  sandbox_id: "c_1",
  turn_id: turn,
  data,
});

const frame = (env) => (env.id === null ? "" : `id: ${env.id}\n`) + `event: ${env.type}\ndata: ${JSON.stringify(env)}\n\n`;

const snapshotEnv = (last, extra = {}) =>
  envelope(null, "snapshot", { sandbox: { id: "c_1", status: "ready" }, turn: null, messages: [], tools: [], approvals: [], last_event_id: String(last), oldest_event_id: "1", pruned_through: "0", ...extra }, null);

// sse answers with an event stream of the given frames, in chunks of a few
// bytes; it ends the stream unless open is set, which keeps it open until
// the reader aborts.
function sse(frames, { open = false, chunk = 7 } = {}) {
  return (req) => {
    const bytes = utf8.encode(frames.join(""));
    const body = new ReadableStream({
      start(ctrl) {
        for (let i = 0; i < bytes.length; i += chunk) {
          ctrl.enqueue(bytes.slice(i, i + chunk));
        }
        if (!open) {
          ctrl.close();
        } else {
          req.signal?.addEventListener("abort", () => ctrl.error(req.signal.reason));
        }
      },
    });
    return new Response(body, { status: 200, headers: { "Content-Type": "text/event-stream" } });
  };
}

const json = (status, body) => () => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });

// collect starts a reader whose callbacks record what they get; the test's
// end closes it, so a failed test leaves no reader reconnecting forever.
function collect(t, opts) {
  const got = { events: [], snapshots: [], states: [], gaps: [], errors: [], statuses: [] };
  const stream = new SandboxEventStream({
    sandboxId: "c_1",
    token: "tok",
    minBackoff: 1,
    maxBackoff: 2,
    onEvent: (e) => got.events.push(e.id),
    onSnapshot: (s, info) => got.snapshots.push({ last: s.last_event_id, resumed: info.resumed, reset: info.reset }),
    onStatus: (s) => got.statuses.push(s.status),
    onState: (s) => got.states.push(s),
    onGap: (g) => got.gaps.push(g),
    onError: (e) => got.errors.push(e),
    ...opts,
  });
  t.after(() => stream.close());
  return { stream, got };
}

// until polls cond on the event loop; the fake server answers at once, so a
// handful of turns is enough, and the bound only stops a broken reader.
async function until(cond) {
  for (let i = 0; i < 5000 && !cond(); i++) {
    await new Promise((r) => setImmediate(r));
  }
  assert.ok(cond(), "condition never held");
}

test("SandboxEventStream", async (t) => {
  await t.test("HeadersAndResume", async (t) => {
    const srv = new FakeServer();
    srv.on(sse([frame(snapshotEnv(2)), ": ping\n\n", frame(envelope(3, "turn.started")), frame(envelope(4, "message.updated"))]));
    // The reconnection replays 4 again: it must not be delivered twice.
    srv.on(sse([frame(snapshotEnv(5)), frame(envelope(4, "message.updated")), frame(envelope(5, "turn.completed"))], { open: true }));
    const { stream, got } = collect(t, { fetch: srv.fetch });
    stream.start();
    await until(() => got.events.length === 3);
    stream.close();

    const [first, second] = srv.requests;
    assert.equal(first.url.pathname, "/v1/sandboxes/c_1/events/stream");
    assert.equal(first.headers.Authorization, "Bearer tok");
    assert.equal(first.headers["Last-Event-ID"], undefined, "no cursor on the first connection");
    assert.equal(second.headers["Last-Event-ID"], "4");
    assert.deepEqual(got.events, ["3", "4", "5"]);
    assert.deepEqual(got.snapshots, [
      { last: "2", resumed: false, reset: false },
      { last: "5", resumed: true, reset: false },
    ]);
    assert.deepEqual(got.states, [State.LIVE, State.RECONNECTING, State.LIVE, State.CLOSED]);
    assert.equal(stream.lastEventId, "5");
    assert.equal(stream.snapshot.last_event_id, "5");
  });

  await t.test("Since", async (t) => {
    const srv = new FakeServer();
    srv.on(sse([frame(snapshotEnv(9)), frame(envelope(8, "turn.started")), frame(envelope(9, "turn.completed"))], { open: true }));
    const { stream, got } = collect(t, { fetch: srv.fetch, since: "7" });
    stream.start();
    await until(() => got.events.length === 2);
    stream.close();
    assert.equal(srv.requests[0].headers["Last-Event-ID"], "7");
    assert.deepEqual(got.snapshots, [{ last: "9", resumed: true, reset: false }]);
  });

  await t.test("StatusAndUnknownTransient", async (t) => {
    const srv = new FakeServer();
    const status = envelope(null, "sandbox.status", { status: "booting", detail: "" }, null);
    const future = envelope(null, "sandbox.future", {}, null);
    srv.on(sse([frame(snapshotEnv(0)), frame(status), frame(future), frame(envelope(1, "turn.started"))], { open: true }));
    const { stream, got } = collect(t, { fetch: srv.fetch });
    stream.start();
    await until(() => got.events.length === 1);
    stream.close();
    assert.deepEqual(got.statuses, ["booting"]);
  });

  await t.test("RecoverPruned", async (t) => {
    const srv = new FakeServer();
    srv.on(sse([frame(snapshotEnv(3)), frame(envelope(4, "turn.started"))]));
    srv.on(json(410, { error: { type: "cursor_pruned", message: "pruned", oldest_event_id: "20", pruned_through: "19", last_event_id: "22" } }));
    srv.on(json(200, { id: "c_1", object: "sandbox", last_event_id: "22", oldest_event_id: "20", pruned_through: "19" }));
    srv.on(json(410, { error: { type: "cursor_pruned", message: "pruned", oldest_event_id: "20", pruned_through: "19", last_event_id: "22" } }));
    srv.on(json(200, { object: "list", data: [envelope(20, "turn.started"), envelope(21, "message.updated")], has_more: true, next_since: "21" }));
    srv.on(json(200, { object: "list", data: [envelope(22, "turn.completed")], has_more: false, next_since: "22" }));
    srv.on(sse([frame(snapshotEnv(23)), frame(envelope(22, "turn.completed")), frame(envelope(23, "turn.started"))], { open: true }));
    const { stream, got } = collect(t, { fetch: srv.fetch });
    stream.start();
    await until(() => got.events.length === 5);
    stream.close();

    const paths = srv.requests.map((r) => r.url.pathname + r.url.search);
    assert.deepEqual(paths, [
      "/v1/sandboxes/c_1/events/stream",
      "/v1/sandboxes/c_1/events/stream",
      "/v1/sandboxes/c_1",
      "/v1/sandboxes/c_1/events?since=4&limit=1000",
      "/v1/sandboxes/c_1/events?since=0&limit=1000",
      "/v1/sandboxes/c_1/events?since=21&limit=1000",
      "/v1/sandboxes/c_1/events/stream",
    ]);
    for (const r of srv.requests) {
      assert.equal(r.headers.Authorization, "Bearer tok");
    }
    assert.equal(srv.requests[6].headers["Last-Event-ID"], "22");
    assert.deepEqual(got.gaps, [{ from: "5", to: "19" }]);
    assert.deepEqual(got.events, ["4", "20", "21", "22", "23"]);
    assert.ok(got.states.includes(State.RECOVERING), `states ${got.states}`);
  });

  await t.test("RecoverStale", async (t) => {
    // The server lost its tail (a restore from a backup): after a few tries
    // the reader starts over from a fresh snapshot and says so.
    const srv = new FakeServer();
    const stale = json(410, { error: { type: "cursor_stale", message: "stale", oldest_event_id: "1", pruned_through: "0", last_event_id: "2" } });
    const sandbox = json(200, { id: "c_1", object: "sandbox", last_event_id: "2", oldest_event_id: "1", pruned_through: "0" });
    srv.on(sse([frame(snapshotEnv(4)), frame(envelope(5, "turn.started"))]));
    for (let i = 0; i < 3; i++) {
      srv.on(stale).on(sandbox);
    }
    srv.on(sse([frame(snapshotEnv(2)), frame(envelope(3, "turn.started"))], { open: true }));
    const { stream, got } = collect(t, { fetch: srv.fetch });
    stream.start();
    await until(() => got.events.length === 2);
    stream.close();
    const last = srv.requests.at(-1);
    assert.equal(last.headers["Last-Event-ID"], undefined, "the fresh start has no cursor");
    assert.deepEqual(got.snapshots.at(-1), { last: "2", resumed: false, reset: true });
    assert.deepEqual(got.events, ["5", "3"]);
  });

  await t.test("ErrUnauthorized", async (t) => {
    const srv = new FakeServer();
    srv.on(json(401, { error: { type: "unauthorized", message: "bad token" } }));
    const { stream, got } = collect(t, { fetch: srv.fetch });
    stream.start();
    await until(() => got.errors.length === 1);
    assert.ok(got.errors[0] instanceof APIError);
    assert.equal(got.errors[0].type, "unauthorized");
    assert.equal(got.errors[0].status, 401);
    assert.equal(stream.state, State.CLOSED);
    assert.equal(srv.requests.length, 1, "no retry after 401");
  });

  await t.test("RetryServerErrors", async (t) => {
    const srv = new FakeServer();
    srv.on(() => Promise.reject(new TypeError("Failed to fetch")));
    srv.on(json(503, {}));
    srv.on(() => new Response("<html>bad gateway</html>", { status: 502 }));
    srv.on(sse([frame(snapshotEnv(0))], { open: true }));
    const { stream, got } = collect(t, { fetch: srv.fetch });
    stream.start();
    await until(() => got.snapshots.length === 1);
    stream.close();
    assert.equal(srv.requests.length, 4);
    assert.deepEqual(got.states, [State.RECONNECTING, State.LIVE, State.CLOSED]);
  });

  await t.test("IdleTimeout", async (t) => {
    const srv = new FakeServer();
    srv.on(sse([frame(snapshotEnv(1))], { open: true }));
    srv.on(sse([frame(snapshotEnv(1))], { open: true }));
    const { stream, got } = collect(t, { fetch: srv.fetch, idleTimeout: 20 });
    stream.start();
    await srv.requested(2);
    stream.close();
    assert.equal(srv.requests[1].headers["Last-Event-ID"], "1");
    assert.ok(got.states.includes(State.RECONNECTING));
  });

  await t.test("CloseStopsCallbacks", async (t) => {
    const srv = new FakeServer();
    let stream;
    const seen = [];
    srv.on(sse([frame(snapshotEnv(0)), frame(envelope(1, "turn.started")), frame(envelope(2, "turn.completed"))], { open: true }));
    ({ stream } = collect(t, {
      fetch: srv.fetch,
      onEvent: (e) => {
        seen.push(e.id);
        stream.close();
      },
    }));
    stream.start();
    await until(() => stream.state === State.CLOSED);
    await srv.requested(1);
    assert.deepEqual(seen, ["1"]);
  });

  await t.test("BaseURLAndTokenFunction", async (t) => {
    const srv = new FakeServer();
    srv.on(sse([frame(snapshotEnv(0))], { open: true }));
    let n = 0;
    const { stream, got } = collect(t, { fetch: srv.fetch, baseURL: "http://127.0.0.1:7410/", token: () => `t${++n}` });
    stream.start();
    await until(() => got.snapshots.length === 1);
    stream.close();
    assert.equal(srv.requests[0].url.href, "http://127.0.0.1:7410/v1/sandboxes/c_1/events/stream");
    assert.equal(srv.requests[0].headers.Authorization, "Bearer t1");
  });
});
