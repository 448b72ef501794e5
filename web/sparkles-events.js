// sparkles-events.js reads the event stream of a Sparkles sandbox in a
// browser (or any runtime with fetch and ReadableStream).
//
// EventSource cannot send an Authorization header, so this module reads
// GET /v1/sandboxes/{id}/events/stream with fetch and parses the SSE framing
// itself, as the HTML standard describes it. SandboxEventStream adds what a
// long-lived reader needs on top: it resumes with Last-Event-ID after a
// disconnect or a server restart, backs off between attempts, delivers each
// durable event once, recovers from a 410 (retention passed the cursor, or
// the log is behind it) through GET sandbox and the JSON events pages, and
// hands over the snapshot every connection starts with.
//
//   import { SandboxEventStream } from "/sparkles-events.js";
//
//   const stream = new SandboxEventStream({
//     sandboxId: "c_…",
//     token: streamToken,
//     onSnapshot(snapshot) { render(snapshot); },
//     onEvent(event) { apply(event); },
//     onState(state) { indicator.textContent = state; },
//   });
//   stream.start();
//   // later: stream.close();
//
// It has no dependencies and needs no build step.

// SSEParser turns the bytes of a text/event-stream response into messages.
// Feed it chunks as they arrive, split anywhere (inside a line, between the
// CR and LF of a line break, inside a UTF-8 character); each feed returns the
// messages that the chunk completed.
//
// A message is {type, data, id, lastEventId}: type is the event field (or
// "message"), data the data lines joined with "\n", id the value of the id
// field of this message's own block or null when it had none, lastEventId
// the stream's last event id as the standard keeps it (it carries over to
// messages without an id field). Comments are passed to onComment. The retry
// field is ignored: SandboxEventStream owns its backoff.
export class SSEParser {
  #decoder = new TextDecoder("utf-8"); // strips one leading BOM, as SSE asks
  #onComment;
  #maxBytes;
  #started = false;
  #afterCR = false; // the last chunk ended in CR: a leading LF belongs to it
  #pending = []; // pieces of the line not yet ended
  #pendingLength = 0;
  #data = "";
  #hasData = false;
  #type = "";
  #id = null;
  #lastEventId = "";
  #out = [];

  // maxBytes bounds one line and one message's data (in UTF-16 code units);
  // a stream that exceeds it is broken or hostile, and feed throws.
  constructor({ onComment, maxBytes = 64 * 1024 * 1024 } = {}) {
    this.#onComment = onComment;
    this.#maxBytes = maxBytes;
  }

  // lastEventId is the stream's last event id buffer.
  get lastEventId() {
    return this.#lastEventId;
  }

  // feed takes a Uint8Array (decoded as UTF-8) or a string, and returns the
  // messages it completed.
  feed(chunk) {
    let text;
    if (typeof chunk === "string") {
      text = chunk;
      if (!this.#started && text.length > 0 && text.charCodeAt(0) === 0xfeff) {
        text = text.slice(1);
      }
    } else {
      text = this.#decoder.decode(chunk, { stream: true });
    }
    if (text.length > 0) {
      this.#started = true;
      this.#lines(text);
    }
    return this.#take();
  }

  // end finishes the stream. A message whose block was not ended by a blank
  // line is dropped, as the standard says.
  end() {
    const rest = this.#decoder.decode();
    if (rest.length > 0) {
      this.#lines(rest);
    }
    this.#pending = [];
    this.#pendingLength = 0;
    this.#resetBlock();
    return this.#take();
  }

  #take() {
    const out = this.#out;
    this.#out = [];
    return out;
  }

  #lines(text) {
    let start = 0;
    if (this.#afterCR) {
      this.#afterCR = false;
      if (text.charCodeAt(0) === 10) {
        start = 1;
      }
    }
    const breaks = /[\r\n]/g;
    breaks.lastIndex = start;
    for (let m = breaks.exec(text); m !== null; m = breaks.exec(text)) {
      let i = m.index;
      let line = text.slice(start, i);
      if (this.#pending.length > 0) {
        this.#pending.push(line);
        line = this.#pending.join("");
        this.#pending = [];
        this.#pendingLength = 0;
      }
      if (text.charCodeAt(i) === 13) {
        if (i + 1 === text.length) {
          this.#afterCR = true;
        } else if (text.charCodeAt(i + 1) === 10) {
          i++;
        }
      }
      start = i + 1;
      breaks.lastIndex = start;
      this.#line(line);
    }
    if (start < text.length) {
      const piece = text.slice(start);
      this.#pendingLength += piece.length;
      if (this.#pendingLength > this.#maxBytes) {
        throw new Error(`event stream: a line longer than ${this.#maxBytes} characters`);
      }
      this.#pending.push(piece);
    }
  }

  #line(line) {
    if (line === "") {
      this.#dispatch();
      return;
    }
    const colon = line.indexOf(":");
    if (colon === 0) {
      if (this.#onComment) {
        this.#onComment(line.slice(1).replace(/^ /, ""));
      }
      return;
    }
    let field = line;
    let value = "";
    if (colon > 0) {
      field = line.slice(0, colon);
      value = line.slice(colon + 1);
      if (value.charCodeAt(0) === 32) {
        value = value.slice(1);
      }
    }
    switch (field) {
      case "event":
        this.#type = value;
        break;
      case "data":
        if (this.#data.length + value.length > this.#maxBytes) {
          throw new Error(`event stream: an event larger than ${this.#maxBytes} characters`);
        }
        this.#data += this.#hasData ? "\n" + value : value;
        this.#hasData = true;
        break;
      case "id":
        // An id with NUL is ignored whole; an empty one resets the buffer.
        if (!value.includes("\0")) {
          this.#lastEventId = value;
          this.#id = value;
        }
        break;
      default:
        // retry and unknown fields: nothing to do.
        break;
    }
  }

  #dispatch() {
    if (this.#hasData) {
      this.#out.push({
        type: this.#type === "" ? "message" : this.#type,
        data: this.#data,
        id: this.#id,
        lastEventId: this.#lastEventId,
      });
    }
    this.#resetBlock();
  }

  #resetBlock() {
    this.#data = "";
    this.#hasData = false;
    this.#type = "";
    this.#id = null;
  }
}

// APIError is an error answer of the Sparkles API: the HTTP status and the
// {type, message} of its body, plus the body itself (a 410 carries the log's
// watermarks there).
export class APIError extends Error {
  constructor(status, type, message, body = {}) {
    super(message || `HTTP ${status}`);
    this.name = "APIError";
    this.status = status;
    this.type = type;
    this.body = body;
  }

  // from reads the error of a non-2xx response.
  static async from(resp) {
    let body = {};
    try {
      body = (await resp.json())?.error ?? {};
    } catch {
      // Not the API's JSON (a proxy's page): the status says enough.
    }
    const type = body.type || (resp.status >= 500 ? "internal" : "http_" + resp.status);
    return new APIError(resp.status, type, body.message || `${resp.status} ${resp.statusText}`.trim(), body);
  }
}

// The states a SandboxEventStream reports to onState.
export const State = Object.freeze({
  CONNECTING: "connecting", // the first connection is being made
  LIVE: "live", // connected; the snapshot arrived
  RECONNECTING: "reconnecting", // the connection broke; waiting to retry
  RECOVERING: "recovering", // a 410: reading what was missed as JSON pages
  CLOSED: "closed", // close() was called, or an error that retrying cannot fix
});

// A 410 cursor_stale (the log ends before the cursor) is retried this many
// times in a row (a replica of a shared store can lag) before the reader
// concludes that the log was replaced and starts over from a fresh snapshot.
const STALE_RETRIES = 3;

// The page size of the recovery reads: the most the API gives.
const RECOVERY_PAGE = 1000;

class IdleError extends Error {
  constructor(ms) {
    super(`event stream: nothing received for ${ms} ms`);
    this.name = "IdleError";
  }
}

const noop = () => {};

// SandboxEventStream follows one sandbox's events until close(), or until an
// answer that retrying cannot fix (401, 403, 404), which it reports to
// onError.
//
// Options:
//   sandboxId   the sandbox (required)
//   token       a bearer token, or a function that returns one per request
//   baseURL     the server, e.g. "http://127.0.0.1:7410"; "" for this origin
//   since       a cursor (decimal string, number or bigint): deliver every
//               retained event after it; undefined starts with the live tail
//               after the first snapshot
//   onEvent(event)            each durable event once, in id order
//   onSnapshot(data, info)    the snapshot of each connection; info.resumed
//               is true when a replay of events after the cursor follows (the
//               snapshot may be ahead of what onEvent has delivered so far),
//               info.reset is true when the reader dropped its cursor because
//               the server's log no longer matches it: start the view over
//   onStatus(data, event)     sandbox.status frames
//   onGap({from, to})         event ids that retention removed unread
//   onState(state, error)     State changes; error is why it left LIVE
//   onError(error)            the stream ended for good
//   minBackoff, maxBackoff    the wait before reconnecting, doubling from
//               the one to the other with jitter (ms; 250 and 5000)
//   idleTimeout  reconnect when nothing, not even a keepalive, arrived for
//               this long (ms; 45000, three server keepalives; 0 disables)
//   fetch       the fetch function (default: the global one)
export class SandboxEventStream {
  #o;
  #fetch;
  #last = 0n; // the highest id delivered, or the cursor given
  #haveCursor = false;
  #reset = false;
  #snapshot = null;
  #state = State.CONNECTING;
  #closed = false;
  #started = false;
  #abort = null;
  #wake = null;

  constructor(options) {
    if (!options || !options.sandboxId) {
      throw new TypeError("SandboxEventStream: sandboxId is required");
    }
    this.#o = {
      baseURL: "",
      minBackoff: 250,
      maxBackoff: 5000,
      idleTimeout: 45000,
      onEvent: noop,
      onSnapshot: noop,
      onStatus: noop,
      onGap: noop,
      onState: noop,
      onError: noop,
      ...options,
    };
    this.#o.baseURL = String(this.#o.baseURL).replace(/\/+$/, "");
    this.#o.maxBackoff = Math.max(this.#o.maxBackoff, this.#o.minBackoff);
    this.#fetch = this.#o.fetch ?? globalThis.fetch.bind(globalThis);
    if (options.since !== undefined && options.since !== null) {
      this.#last = BigInt(options.since);
      this.#haveCursor = true;
    }
  }

  // lastEventId is the id of the last durable event delivered (the cursor a
  // reconnection resumes from), as a decimal string.
  get lastEventId() {
    return this.#last.toString();
  }

  // snapshot is the data of the latest snapshot, or null before the first.
  get snapshot() {
    return this.#snapshot;
  }

  get state() {
    return this.#state;
  }

  // start begins reading in the background and returns the stream.
  start() {
    if (!this.#started) {
      this.#started = true;
      this.#run();
    }
    return this;
  }

  // close ends the stream; no callback runs after it returns.
  close() {
    if (this.#closed) {
      return;
    }
    this.#setState(State.CLOSED);
    this.#closed = true;
    this.#abort?.abort();
    this.#wake?.();
  }

  async #run() {
    let attempt = 0;
    let stale = 0;
    while (!this.#closed) {
      let { connected, error } = await this.#connect();
      if (this.#closed) {
        return;
      }
      if (connected) {
        attempt = 0;
      }
      if (error instanceof APIError && (error.type === "cursor_pruned" || error.type === "cursor_stale")) {
        if (error.type === "cursor_stale") {
          stale++;
        }
        this.#setState(State.RECOVERING);
        try {
          await this.#catchUp(error, stale);
          if (error.type === "cursor_pruned") {
            stale = 0;
          }
          continue; // resume at once from what the pages delivered
        } catch (e) {
          error = e;
        }
      } else if (connected) {
        stale = 0;
      }
      if (this.#closed) {
        return;
      }
      if (!retryable(error)) {
        this.#setState(State.CLOSED, error);
        this.#call("onError", error);
        this.#closed = true;
        return;
      }
      this.#setState(State.RECONNECTING, error);
      await this.#sleep(this.#backoff(attempt++));
    }
  }

  // backoff is the wait before attempt n: the minimum doubled n times,
  // capped, with jitter in its upper half so that the readers of a restarted
  // server do not all come back at once.
  #backoff(n) {
    let d = this.#o.minBackoff;
    for (let i = 0; i < n && d < this.#o.maxBackoff; i++) {
      d *= 2;
    }
    d = Math.min(d, this.#o.maxBackoff);
    return d / 2 + Math.random() * (d / 2);
  }

  #sleep(ms) {
    return new Promise((resolve) => {
      const t = setTimeout(done, ms);
      function done() {
        clearTimeout(t);
        resolve();
      }
      this.#wake = done;
    }).finally(() => {
      this.#wake = null;
    });
  }

  #headers(extra = {}) {
    const tok = typeof this.#o.token === "function" ? this.#o.token() : this.#o.token;
    const h = { ...extra };
    if (tok) {
      h.Authorization = "Bearer " + tok;
    }
    return h;
  }

  #url(path) {
    return `${this.#o.baseURL}/v1/sandboxes/${encodeURIComponent(this.#o.sandboxId)}${path}`;
  }

  // connect runs one connection until it ends. connected reports whether it
  // got as far as the snapshot; error is why it ended.
  async #connect() {
    const ac = new AbortController();
    this.#abort = ac;
    let connected = false;
    let idle = null;
    const arm = () => {
      if (this.#o.idleTimeout > 0) {
        clearTimeout(idle);
        idle = setTimeout(() => ac.abort(new IdleError(this.#o.idleTimeout)), this.#o.idleTimeout);
      }
    };
    try {
      const headers = this.#headers({ Accept: "text/event-stream" });
      if (this.#haveCursor) {
        headers["Last-Event-ID"] = this.#last.toString();
      }
      arm();
      const resp = await this.#fetch(this.#url("/events/stream"), { headers, signal: ac.signal, cache: "no-store" });
      if (!resp.ok) {
        throw await APIError.from(resp);
      }
      const ct = resp.headers.get("Content-Type") || "";
      if (!ct.startsWith("text/event-stream")) {
        throw new APIError(resp.status, "internal", `the stream answered ${JSON.stringify(ct)} instead of text/event-stream`);
      }
      const parser = new SSEParser();
      const reader = resp.body.getReader();
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done || this.#closed) {
            break;
          }
          arm();
          for (const m of parser.feed(value)) {
            if (this.#handle(m)) {
              connected = true;
            }
            if (this.#closed) {
              break;
            }
          }
        }
      } finally {
        reader.cancel().catch(noop);
      }
      return { connected, error: new Error("event stream: the server ended the stream") };
    } catch (e) {
      const error = ac.signal.aborted && ac.signal.reason instanceof IdleError ? ac.signal.reason : e;
      return { connected, error };
    } finally {
      clearTimeout(idle);
      ac.abort();
      if (this.#abort === ac) {
        this.#abort = null;
      }
    }
  }

  // handle decodes one message and passes it on; true for a snapshot.
  #handle(m) {
    const env = JSON.parse(m.data);
    switch (env.type) {
      case "snapshot": {
        const resumed = this.#haveCursor;
        const reset = this.#reset;
        this.#reset = false;
        this.#snapshot = env.data;
        if (!this.#haveCursor) {
          // The live tail starts after the first snapshot; from here on a
          // reconnection resumes instead of skipping ahead.
          this.#last = BigInt(env.data.last_event_id ?? 0);
          this.#haveCursor = true;
        }
        this.#setState(State.LIVE);
        this.#call("onSnapshot", env.data, { resumed, reset, event: env });
        return true;
      }
      case "sandbox.status":
        this.#call("onStatus", env.data, env);
        return false;
    }
    if (env.id === null || env.id === undefined) {
      return false; // a transient frame of a newer server
    }
    this.#deliver(env);
    return false;
  }

  #deliver(env) {
    const id = BigInt(env.id);
    if (id <= this.#last || this.#closed) {
      return; // a replay after a reconnection overlaps what came before
    }
    this.#last = id;
    this.#haveCursor = true;
    this.#call("onEvent", env);
  }

  // call runs a consumer's callback; its failure is the consumer's bug and
  // must not end the stream.
  #call(name, ...args) {
    if (this.#closed) {
      return;
    }
    try {
      this.#o[name](...args);
    } catch (e) {
      console.error(`SandboxEventStream ${name}:`, e);
    }
  }

  #setState(state, error) {
    if (this.#closed || this.#state === state) {
      return;
    }
    this.#state = state;
    this.#call("onState", state, error);
  }

  async #api(path) {
    const resp = await this.#fetch(this.#url(path), { headers: this.#headers({ Accept: "application/json" }), cache: "no-store" });
    if (!resp.ok) {
      throw await APIError.from(resp);
    }
    return resp.json();
  }

  #page(since) {
    return this.#api(`/events?since=${since}&limit=${RECOVERY_PAGE}`);
  }

  // catchUp answers a 410 as the contract describes: read the sandbox and
  // the JSON pages from the cursor and deliver what the stream missed. When
  // retention passed the cursor, the pages start from what is retained and
  // the pruned ids are reported to onGap.
  async #catchUp(err, stale) {
    const sb = await this.#api("");
    const last = this.#last;
    if (err.type === "cursor_stale" && BigInt(sb.last_event_id ?? 0) < last) {
      if (stale < STALE_RETRIES) {
        throw err; // maybe a lagging replica: retry after a wait
      }
      // The log ends before events this reader delivered: it was replaced.
      // Nothing after the cursor can be trusted; start over from a snapshot.
      this.#last = 0n;
      this.#haveCursor = false;
      this.#reset = true;
      return;
    }
    let cursor = last;
    let page;
    try {
      page = await this.#page(cursor);
    } catch (e) {
      if (!(e instanceof APIError && e.type === "cursor_pruned")) {
        throw e;
      }
      const through = [e.body.pruned_through, sb.pruned_through, err.body.pruned_through]
        .map((v) => BigInt(v ?? 0))
        .reduce((a, b) => (a > b ? a : b));
      this.#call("onGap", { from: (last + 1n).toString(), to: through.toString() });
      // Nothing at or below the pruned mark exists any more.
      if (through > this.#last) {
        this.#last = through;
      }
      cursor = 0n;
      page = await this.#page(cursor);
    }
    for (;;) {
      for (const env of page.data ?? []) {
        this.#deliver(env);
      }
      const next = BigInt(page.next_since ?? 0);
      if (!page.has_more || next <= cursor || this.#closed) {
        return;
      }
      cursor = next;
      page = await this.#page(cursor);
    }
  }
}

// retryable tells whether reconnecting may cure err: the network broke, the
// server is restarting or failed on its side. A refused token, a missing
// sandbox or a malformed request stay so.
function retryable(err) {
  if (!(err instanceof APIError)) {
    return true;
  }
  return err.type === "cursor_stale" || err.status >= 500 || err.status === 408 || err.status === 429;
}
