// api.js is the page's client of the Sparkles HTTP API: every call carries
// the bearer token, every error answer becomes an APIError, and a server
// that cannot be reached a NetworkError (fetch's own TypeError says only
// "Failed to fetch").
import { APIError } from "./sparkles-events.js";

// NetworkError is a call that got no answer: the server is down or
// restarting, or the network between is gone.
export class NetworkError extends Error {
  constructor(cause) {
    super("The server cannot be reached; the page reconnects by itself when it is back.", { cause });
    this.name = "NetworkError";
    this.type = "network";
  }
}

export class API {
  #token;

  // token is a function that returns the current bearer token.
  constructor(token) {
    this.#token = token;
  }

  async #call(method, path, body) {
    const headers = { Accept: "application/json", Authorization: "Bearer " + this.#token() };
    const init = { method, headers, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (e) {
      throw new NetworkError(e);
    }
    if (!resp.ok) {
      throw await APIError.from(resp);
    }
    return resp.json();
  }

  listSandboxes({ after = "", limit = 100 } = {}) {
    const q = new URLSearchParams({ limit: String(limit) });
    if (after) {
      q.set("after", after);
    }
    return this.#call("GET", `/v1/sandboxes?${q}`);
  }

  createSandbox(params = {}) {
    return this.#call("POST", "/v1/sandboxes", params);
  }

  getSandbox(id) {
    return this.#call("GET", `/v1/sandboxes/${encodeURIComponent(id)}`);
  }

  deleteSandbox(id) {
    return this.#call("DELETE", `/v1/sandboxes/${encodeURIComponent(id)}`);
  }

  startTurn(id, input) {
    return this.#call("POST", `/v1/sandboxes/${encodeURIComponent(id)}/turns`, { input });
  }

  cancelTurn(id, turnID) {
    return this.#call("POST", `/v1/sandboxes/${encodeURIComponent(id)}/turns/${encodeURIComponent(turnID)}/cancel`);
  }

  // events reads a page of a sandbox's log: the events after since.
  events(id, since, limit = 500) {
    const q = new URLSearchParams({ since: String(since), limit: String(limit) });
    return this.#call("GET", `/v1/sandboxes/${encodeURIComponent(id)}/events?${q}`);
  }

  // decide answers an approval with {decision: "approve"|"deny"} or {option_id}.
  decide(id, approvalID, decision) {
    return this.#call("POST", `/v1/sandboxes/${encodeURIComponent(id)}/approvals/${encodeURIComponent(approvalID)}`, decision);
  }
}
