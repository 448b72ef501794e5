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
    const headers = { Accept: "application/json" };
    let raw;
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      raw = JSON.stringify(body);
    }
    return (await this.#fetch(method, path, { headers, body: raw })).json();
  }

  // fetch sends a request with the token and returns the answer, which is
  // a success: a body that is not JSON (a file, an archive, a diff) is the
  // caller's to read.
  async #fetch(method, path, { headers = {}, body, signal } = {}) {
    const init = { method, headers: { ...headers, Authorization: "Bearer " + this.#token() }, cache: "no-store", body, signal };
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (e) {
      if (signal?.aborted) {
        throw e;
      }
      throw new NetworkError(e);
    }
    if (!resp.ok) {
      throw await APIError.from(resp);
    }
    return resp;
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

  // files lists a page of a workspace directory ("" is the root).
  files(id, dir, { after = "", limit = 200 } = {}) {
    const q = new URLSearchParams({ limit: String(limit) });
    if (after) {
      q.set("after", after);
    }
    return this.#call("GET", `${filesURL(id, dir)}?${q}`);
  }

  // file answers the GET of a workspace file; its body is the caller's.
  file(id, path, { download = false, signal } = {}) {
    return this.#fetch("GET", filesURL(id, path) + (download ? "?download=1" : ""), { signal });
  }

  // writeFile puts body (a Blob or File) at path, parents made, and
  // returns the file's entry.
  async writeFile(id, path, body) {
    return (await this.#fetch("PUT", filesURL(id, path), { headers: { Accept: "application/json" }, body })).json();
  }

  // archive answers the workspace as tar.gz.
  archive(id) {
    return this.#fetch("GET", `/v1/sandboxes/${encodeURIComponent(id)}/archive`);
  }

  // diff returns the unified diff of what a turn changed.
  async diff(id, turnID) {
    const path = `/v1/sandboxes/${encodeURIComponent(id)}/turns/${encodeURIComponent(turnID)}/diff`;
    return (await this.#fetch("GET", path, { headers: { Accept: "text/x-diff" } })).text();
  }

  // revert puts the workspace back as it was when a turn started.
  revert(id, turnID) {
    return this.#call("POST", `/v1/sandboxes/${encodeURIComponent(id)}/turns/${encodeURIComponent(turnID)}/revert`);
  }

  // decide answers an approval with {decision: "approve"|"deny"} or {option_id}.
  decide(id, approvalID, decision) {
    return this.#call("POST", `/v1/sandboxes/${encodeURIComponent(id)}/approvals/${encodeURIComponent(approvalID)}`, decision);
  }

  // webhooks lists the webhook endpoints (the full token only).
  webhooks() {
    return this.#call("GET", "/v1/webhooks");
  }

  // updateWebhook changes an endpoint: {enabled}, {url}, {events}.
  updateWebhook(id, patch) {
    return this.#call("PATCH", `/v1/webhooks/${encodeURIComponent(id)}`, patch);
  }

  // webhookDeliveries lists an endpoint's recent attempts, newest first.
  webhookDeliveries(id) {
    return this.#call("GET", `/v1/webhooks/${encodeURIComponent(id)}/deliveries`);
  }

  // retryDelivery attempts a delivery (its webhook-id) once more now and
  // returns the attempt.
  retryDelivery(id, delivery) {
    return this.#call("POST", `/v1/webhooks/${encodeURIComponent(id)}/deliveries/${encodeURIComponent(delivery)}/retry`);
  }
}

// filesURL is the files route of a workspace path: each segment escaped,
// the slashes between them kept.
export function filesURL(id, path) {
  const base = `/v1/sandboxes/${encodeURIComponent(id)}/files`;
  const segs = String(path ?? "").split("/").filter((s) => s !== "");
  return segs.length === 0 ? base : `${base}/${segs.map(encodeURIComponent).join("/")}`;
}
