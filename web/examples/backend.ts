// backend.ts: a Node backend in front of Sparkles, in TypeScript. It keeps
// the server token to itself: it creates a sandbox per session, hands the
// browser only that sandbox's stream token, and reads the sandbox's events
// itself too, to answer approvals and to keep the final message.
//
//   SPARKLES_URL=http://127.0.0.1:7410 SPARKLES_TOKEN=… node backend.js
//
// CI checks it with `tsc --noEmit` against sparkles-events.d.ts (see
// web/tsconfig.json); it is an example, not part of the console.

import { createServer } from "node:http";

import { APIError, SandboxEventStream, State, type DurableEvent, type Sandbox } from "../sparkles-events.js";

const baseURL = process.env.SPARKLES_URL ?? "http://127.0.0.1:7410";
const serverToken = process.env.SPARKLES_TOKEN ?? "";

interface CreatedSandbox extends Sandbox {
  stream_token: string;
}

async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  const resp = await fetch(baseURL + path, {
    method,
    headers: { Authorization: `Bearer ${serverToken}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!resp.ok) {
    throw await APIError.from(resp);
  }
  return (await resp.json()) as T;
}

// The last event id handled per sandbox. Keep it where a restart of this
// backend finds it, and hand it back as `since`: the reader resumes after
// it and delivers each event once.
const cursors = new Map<string, string>();

function follow(sandboxId: string): SandboxEventStream {
  return new SandboxEventStream({
    sandboxId,
    token: serverToken,
    baseURL,
    since: cursors.get(sandboxId) ?? "0",
    onEvent(event: DurableEvent) {
      switch (event.type) {
        case "approval.requested": {
          // A policy of this backend: let the agent read, ask for the rest.
          const decision = event.data.kind === "read" ? "approve" : "deny";
          void call(`POST`, `/v1/sandboxes/${sandboxId}/approvals/${event.data.approval_id}`, { decision }).catch((err: unknown) => {
            if (!(err instanceof APIError && err.type === "approval_resolved")) {
              console.error("decide:", err);
            }
          });
          break;
        }
        case "message.completed":
          console.log(`[${sandboxId}] ${event.data.text}`);
          break;
        case "turn.completed":
          if (event.data.error) {
            console.log(`[${sandboxId}] turn ${event.turn_id} ${event.data.status}: ${event.data.error.code}`);
          }
          break;
        case "sandbox.error":
          console.log(`[${sandboxId}] ${event.data.code}: ${event.data.message}`);
          break;
      }
      cursors.set(sandboxId, event.id);
    },
    onGap({ from, to }) {
      console.warn(`[${sandboxId}] retention removed events ${from}..${to} before they were read`);
    },
    onState(state, error) {
      if (state === State.RECONNECTING) {
        console.warn(`[${sandboxId}] reconnecting:`, error);
      }
    },
    onError(error) {
      console.error(`[${sandboxId}] stream ended:`, error);
    },
  }).start();
}

// POST /sessions creates a sandbox and answers what the browser needs: the
// sandbox id and its stream token, never the server token.
createServer(async (req, res) => {
  if (req.method !== "POST" || req.url !== "/sessions") {
    res.writeHead(404).end();
    return;
  }
  try {
    const sb = await call<CreatedSandbox>("POST", "/v1/sandboxes", { metadata: { session: "example" } });
    follow(sb.id);
    res.writeHead(201, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ sandbox_id: sb.id, stream_token: sb.stream_token }));
  } catch (err) {
    const status = err instanceof APIError ? err.status : 500;
    res.writeHead(status >= 500 ? 502 : status).end();
  }
}).listen(3000, "127.0.0.1");
