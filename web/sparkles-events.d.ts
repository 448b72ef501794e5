// Type declarations of sparkles-events.js, the fetch-based reader of a
// Sparkles sandbox's event stream, for TypeScript in browsers and in Node
// backends (Node 18 and later have fetch and ReadableStream). The event
// types mirror the OpenAPI document (server/openapi.json): the envelope and
// each type's data of docs/events.md. Answers and data may gain
// fields within v1; these types name the ones a reader can rely on.

/** A decimal event id: compare ids as integers (BigInt), not as strings. */
export type EventID = string;

/** UTC, RFC 3339 with three digits of milliseconds. */
export type Timestamp = string;

export type SandboxStatusValue = "creating" | "booting" | "ready" | "stopping" | "stopped" | "failed" | "deleted";
export type TurnStatus = "queued" | "running" | "succeeded" | "failed" | "canceled";
export type StopReason = "end_turn" | "max_tokens" | "max_turn_requests" | "refusal" | "canceled" | "error";
export type MessageKind = "text" | "reasoning";
export type ToolKind = "read" | "edit" | "delete" | "move" | "search" | "execute" | "think" | "fetch" | "other";
export type ToolStatus = "pending" | "running" | "completed" | "failed" | "canceled";
export type OptionKind = "allow_once" | "allow_always" | "reject_once" | "reject_always";
export type SandboxErrorCode =
  | "agent_start_failed"
  | "agent_exited"
  | "agent_error"
  | "protocol_error"
  | "session_lost"
  | "turn_timeout"
  | "coordinator_restarted"
  | "log_full"
  | "disk_full"
  | "source_failed"
  | "server_stopped"
  | "config_failed"
  | "input_unsupported"
  | "internal";

export interface TextInput {
  type: "text";
  text: string;
}

/** An image of a turn's input: its media type and decoded size, never its data. */
export interface ImageInput {
  type: "image";
  media_type: string;
  bytes: number;
}

/** A file of the workspace in a turn's input, by its relative path. */
export interface FileInput {
  type: "file";
  path: string;
}

/** One block of a turn's input as the log records it. */
export type Input = TextInput | ImageInput | FileInput;

/** The turn resource. */
export interface Turn {
  id: string;
  object: "turn";
  sandbox_id: string;
  status: TurnStatus;
  input: Input[];
  created_at: Timestamp;
  completed_at: Timestamp | null;
  stop_reason: StopReason | null;
  /** The last turn.usage, then turn.completed's usage when it has one; absent before either. */
  usage?: Usage;
}

/** The sandbox resource, with the watermarks of its log. */
export interface Sandbox {
  id: string;
  object: "sandbox";
  status: SandboxStatusValue;
  status_detail: string;
  agent: string;
  created_at: Timestamp;
  updated_at: Timestamp;
  metadata: Record<string, string>;
  current_turn: Turn | null;
  last_event_id: EventID;
  oldest_event_id: EventID;
  pruned_through: EventID;
  /** Where the workspace came from; absent when it started empty. */
  source?: Source;
  /** Created with tool_output: the log has tool.output events. */
  tool_output: boolean;
  /** The turns queued behind current_turn, first to start first; absent when none wait. */
  queued_turns?: Turn[];
  /** The MCP servers given at create; absent when none were. */
  mcp_servers?: MCPServer[];
  /** The agent's mode and model with the choices it announced; absent while none was asked for and the agent announced none. */
  config?: AgentConfig;
}

/** A mode or a model an agent offers. */
export interface ConfigChoice {
  id: string;
  name: string;
}

/** The mode and the model a sandbox's agent works in, with the choices it announced (at most 50 of each; empty when it announced none). */
export interface AgentConfig {
  mode?: string;
  model?: string;
  modes: ConfigChoice[];
  models: ConfigChoice[];
}

/** An MCP server of a sandbox: the names of its env variables and headers, never their values. */
export interface MCPServer {
  name: string;
  type: "stdio" | "http" | "sse";
  command?: string;
  args?: string[];
  env_keys?: string[];
  url?: string;
  header_names?: string[];
}

/** A sandbox's source: a git repository cloned into its workspace. */
export interface Source {
  git?: {
    /** Never holds a credential. */
    url: string;
    ref?: string;
    depth?: number;
  };
}

export interface ErrorInfo {
  code: SandboxErrorCode;
  message: string;
}

/** The token counts are the prompt answer's: 0 in turn.usage, which comes before it. */
export interface Usage {
  input_tokens: number;
  output_tokens: number;
  total_tokens: number;
  context_tokens?: number;
  context_window?: number;
  /** What the agent says its session has cost so far; absent when it reported none. */
  cost?: Cost;
}

export interface Cost {
  /** Not negative. */
  amount: number;
  /** An ISO 4217 code, upper case ("USD"). */
  currency: string;
}

/** The running turn's usage so far: each replaces the last. */
export interface TurnUsageData {
  usage: Usage;
}

export interface MessageUpdatedData {
  message_id: string;
  part_id: string;
  index: number;
  kind: MessageKind;
  /** The whole part so far: a snapshot, not a delta. */
  text: string;
}

export interface Part {
  part_id: string;
  index: number;
  kind: MessageKind;
  text: string;
}

export interface MessageCompletedData {
  message_id: string;
  parts: Part[];
  /** The text parts joined by a blank line; never empty. */
  text: string;
}

export interface Location {
  /** Relative to the sandbox directory. */
  path: string;
  line: number | null;
}

export interface ToolUpdatedData {
  tool_call_id: string;
  title: string;
  kind: ToolKind;
  status: ToolStatus;
  locations: Location[];
  /** In a snapshot's tools only: the tool's last tool.output data. */
  output?: ToolOutputData;
}

/** What a command printed: each replaces the tool's last. */
export interface ToolOutputData {
  tool_call_id: string;
  /** The last 16 KiB, escape sequences and control bytes but \n and \t left out, redacted. */
  text: string;
  /** Earlier output was dropped. */
  truncated: boolean;
  /** Null until the command ended, and when the agent did not say. */
  exit_code: number | null;
}

export interface ApprovalOption {
  option_id: string;
  kind: OptionKind;
  label: string;
}

export interface ApprovalRequestedData {
  approval_id: string;
  tool_call_id: string;
  title: string;
  kind: ToolKind;
  options: ApprovalOption[];
  expires_at: Timestamp;
}

export interface ApprovalResolvedData {
  approval_id: string;
  decision: "approved" | "denied" | "canceled" | "failed";
  /** Empty when no option was answered (canceled, failed). */
  option_id: string;
  reason: "user" | "timeout" | "turn_canceled" | "agent_exited";
}

export interface TurnStartedData {
  input: Input[];
}

/** A turn accepted with queue while another was open; turn_id is the queued turn. */
export interface TurnQueuedData {
  input: Input[];
  /** Its place in the queue when it was accepted, 1 for the next to start. */
  position: number;
}

export interface TurnCompletedData {
  status: "succeeded" | "failed" | "canceled";
  stop_reason: StopReason;
  /** Why a failed turn failed; `server_stopped` on a canceled turn the server's stop ended; else null. */
  error: ErrorInfo | null;
  duration_ms: number;
  usage: Usage | null;
  /** What the turn changed in the workspace; null when not recorded. */
  changes: Changes | null;
}

export interface FileChange {
  /** Relative to the workspace, with forward slashes. */
  path: string;
  change: "added" | "modified" | "deleted";
}

export interface Changes {
  added: number;
  modified: number;
  deleted: number;
  /** Sorted by path, at most 1,000; the counts cover all. */
  files: FileChange[];
  truncated: boolean;
}

export interface WorkspaceRevertedData {
  /** The turn whose start the workspace was put back to. */
  turn_id: string;
}

export type PlanEntryStatus = "pending" | "in_progress" | "completed";
export type PlanEntryPriority = "high" | "medium" | "low";

export interface PlanEntry {
  /** At most 500 characters, redacted, paths relative to the sandbox. */
  content: string;
  status: PlanEntryStatus;
  priority: PlanEntryPriority;
}

/** The agent's whole plan for the turn: each replaces the last. */
export interface PlanUpdatedData {
  /** At most 100. */
  entries: PlanEntry[];
}

/** The sandbox's agent config as it now is: it replaces the last. */
export interface SandboxUpdatedData {
  config: AgentConfig;
}

export interface SandboxErrorData {
  code: SandboxErrorCode;
  message: string;
}

export interface SnapshotData {
  sandbox: Sandbox;
  turn: Turn | null;
  messages: MessageUpdatedData[];
  tools: ToolUpdatedData[];
  approvals: ApprovalRequestedData[];
  last_event_id: EventID;
  oldest_event_id: EventID;
  pruned_through: EventID;
  /** Tools of the turn left out to keep the snapshot within 1 MiB; the JSON events pages have them. */
  tools_omitted: number;
  /** Message parts of the turn left out likewise. */
  messages_omitted: number;
  /** The turn's last plan.updated data; null before one. */
  plan: PlanUpdatedData | null;
}

export interface SandboxStatusData {
  status: SandboxStatusValue;
  detail: string;
}

/** The envelope of every event. */
interface Envelope<T extends string, D, I extends EventID | null> {
  id: I;
  object: "sandbox.event";
  version: "v1";
  type: T;
  ts: Timestamp;
  sandbox_id: string;
  /** Null when the event belongs to no turn. */
  turn_id: string | null;
  data: D;
}

export type TurnStartedEvent = Envelope<"turn.started", TurnStartedData, EventID>;
export type TurnQueuedEvent = Envelope<"turn.queued", TurnQueuedData, EventID>;
export type TurnCompletedEvent = Envelope<"turn.completed", TurnCompletedData, EventID>;
export type MessageUpdatedEvent = Envelope<"message.updated", MessageUpdatedData, EventID>;
export type MessageCompletedEvent = Envelope<"message.completed", MessageCompletedData, EventID>;
export type ToolUpdatedEvent = Envelope<"tool.updated", ToolUpdatedData, EventID>;
export type ApprovalRequestedEvent = Envelope<"approval.requested", ApprovalRequestedData, EventID>;
export type ApprovalResolvedEvent = Envelope<"approval.resolved", ApprovalResolvedData, EventID>;
export type SandboxErrorEvent = Envelope<"sandbox.error", SandboxErrorData, EventID>;
/** Belongs to no turn: turn_id is null. */
export type WorkspaceRevertedEvent = Envelope<"workspace.reverted", WorkspaceRevertedData, EventID>;
export type PlanUpdatedEvent = Envelope<"plan.updated", PlanUpdatedData, EventID>;
export type TurnUsageEvent = Envelope<"turn.usage", TurnUsageData, EventID>;
export type ToolOutputEvent = Envelope<"tool.output", ToolOutputData, EventID>;
/** turn_id is the turn the agent switched in, null for a change between turns. */
export type SandboxUpdatedEvent = Envelope<"sandbox.updated", SandboxUpdatedData, EventID>;
export type SnapshotEvent = Envelope<"snapshot", SnapshotData, null>;
export type SandboxStatusEvent = Envelope<"sandbox.status", SandboxStatusData, null>;

/** An event of the log: what onEvent receives, discriminated by `type`. */
export type DurableEvent =
  | TurnStartedEvent
  | TurnQueuedEvent
  | TurnCompletedEvent
  | MessageUpdatedEvent
  | MessageCompletedEvent
  | ToolUpdatedEvent
  | ApprovalRequestedEvent
  | ApprovalResolvedEvent
  | SandboxErrorEvent
  | WorkspaceRevertedEvent
  | PlanUpdatedEvent
  | TurnUsageEvent
  | ToolOutputEvent
  | SandboxUpdatedEvent;

/** Any frame of the stream. */
export type SandboxEvent = DurableEvent | SnapshotEvent | SandboxStatusEvent;

/** One SSE message, as SSEParser returns it. */
export interface SSEMessage {
  /** The event field, or "message". */
  type: string;
  /** The data lines joined with "\n". */
  data: string;
  /** This message's own id field, or null when it had none. */
  id: string | null;
  /** The stream's last event id (carried over to messages without one). */
  lastEventId: string;
}

export interface SSEParserOptions {
  onComment?: (text: string) => void;
  /** Bounds one line and one message's data (UTF-16 code units); default 64 MiB. */
  maxBytes?: number;
}

/** Turns the bytes of a text/event-stream response into messages. */
export class SSEParser {
  constructor(options?: SSEParserOptions);
  readonly lastEventId: string;
  /** Feeds a chunk, split anywhere; returns the messages it completed. */
  feed(chunk: Uint8Array | string): SSEMessage[];
  /** Ends the stream; a message not ended by a blank line is dropped. */
  end(): SSEMessage[];
}

/** The error body of an API answer; a 410 also carries the watermarks. */
export interface APIErrorBody {
  type?: string;
  message?: string;
  oldest_event_id?: EventID;
  pruned_through?: EventID;
  last_event_id?: EventID;
  [field: string]: unknown;
}

/** An error answer of the API. */
export class APIError extends Error {
  constructor(status: number, type: string, message: string, body?: APIErrorBody);
  readonly name: "APIError";
  status: number;
  /** The error type of docs/errors.md (e.g. "cursor_pruned"), or "http_<status>". */
  type: string;
  body: APIErrorBody;
  /** Reads the error of a non-2xx response. */
  static from(resp: Response): Promise<APIError>;
}

export type StreamState = "connecting" | "live" | "reconnecting" | "recovering" | "closed";

/** The states a SandboxEventStream reports to onState. */
export declare const State: Readonly<{
  CONNECTING: "connecting";
  LIVE: "live";
  RECONNECTING: "reconnecting";
  RECOVERING: "recovering";
  CLOSED: "closed";
}>;

export interface SnapshotInfo {
  /** A replay of the events after the cursor follows this snapshot. */
  resumed: boolean;
  /** The reader dropped its cursor (the log was replaced): start the view over. */
  reset: boolean;
  event: SnapshotEvent;
}

/** The fetch this reader needs: the global fetch, or one of your own. */
export type FetchLike = (input: string, init: RequestInit) => Promise<Response>;

export interface SandboxEventStreamOptions {
  sandboxId: string;
  /** A bearer token (the server token in a backend, a stream token in a browser), or a function returning one per request. */
  token?: string | (() => string);
  /** The server, e.g. "http://127.0.0.1:7410"; "" (the default) for this page's origin. */
  baseURL?: string;
  /** Deliver every retained event after this id; undefined starts with the live tail after the first snapshot. */
  since?: string | number | bigint | null;
  /** Each durable event once, in id order. */
  onEvent?: (event: DurableEvent) => void;
  onSnapshot?: (data: SnapshotData, info: SnapshotInfo) => void;
  onStatus?: (data: SandboxStatusData, event: SandboxStatusEvent) => void;
  /** Event ids that retention removed before they were read. */
  onGap?: (gap: { from: EventID; to: EventID }) => void;
  onState?: (state: StreamState, error?: unknown) => void;
  /** The stream ended for good (401, 403, 404, or another answer retrying cannot fix). */
  onError?: (error: unknown) => void;
  /** Milliseconds; the wait before reconnecting doubles from minBackoff (250) to maxBackoff (5000). */
  minBackoff?: number;
  maxBackoff?: number;
  /** Reconnect when nothing arrived for this long (ms; 45000; 0 disables). */
  idleTimeout?: number;
  fetch?: FetchLike;
}

/**
 * Follows one sandbox's events: resumes with Last-Event-ID after a
 * disconnect, delivers each durable event once, recovers from a 410
 * through the JSON pages.
 */
export class SandboxEventStream {
  constructor(options: SandboxEventStreamOptions);
  /** The id of the last durable event delivered: where a reconnection resumes. */
  readonly lastEventId: EventID;
  /** The latest snapshot's data, or null before the first. */
  readonly snapshot: SnapshotData | null;
  readonly state: StreamState;
  /** Begins reading in the background. */
  start(): this;
  /** Ends the stream; no callback runs after it returns. */
  close(): void;
}

// ---- Webhooks (/v1/webhooks, the server token only; docs/webhooks.md) ----

/** A durable event type: the types a webhook endpoint can receive. */
export type WebhookEventType = DurableEvent["type"];

/** active: delivering; failing: the last attempt failed and a retry is due; disabled: enabled is false. */
export type WebhookState = "active" | "failing" | "disabled";

/** One attempt to deliver an event to an endpoint, as the node that made it remembers it. */
export interface WebhookDelivery {
  object: "webhook_delivery";
  /** The webhook-id header: the same for every attempt of one event to one endpoint. */
  id: string;
  sandbox_id: string;
  event_id: EventID;
  type: WebhookEventType;
  /** 1 for the event's first attempt on this node. */
  attempt: number;
  at: Timestamp;
  /** 0 when the receiver gave no answer. */
  status_code: number;
  duration_ms: number;
  /** Why the attempt failed; absent after a 2xx. */
  error?: string;
  /** The start of the response's body (256 bytes at most). */
  response?: string;
  /** When the event is tried again, after a failure. */
  next_attempt_at?: Timestamp;
}

/** An endpoint's delivery figures, as counted by the node that answers. */
export interface WebhookStats {
  delivered: number;
  failed: number;
  /** Events beyond the endpoint's cursors, up to the logs' heads. */
  lag: number;
  oldest_undelivered_at?: Timestamp;
  last_attempt?: WebhookDelivery;
}

/** A webhook endpoint; never its secret. */
export interface Webhook {
  object: "webhook";
  id: string;
  url: string;
  events: WebhookEventType[];
  /** When set, only this sandbox's events are delivered. */
  sandbox_id?: string;
  description?: string;
  enabled: boolean;
  state: WebhookState;
  /** Why deliveries stopped on their own; cleared by enabling the endpoint. */
  disabled_reason?: string;
  created_at: Timestamp;
  stats: WebhookStats;
}

/** The answer of a creation or a rotation: the endpoint and its secret, shown this once. */
export interface CreatedWebhook extends Webhook {
  /** "whsec_" and base64, the Standard Webhooks format. */
  secret: string;
}

export interface WebhookParams {
  url: string;
  events?: WebhookEventType[];
  sandbox_id?: string;
  description?: string;
}

/** The fields to change; those left out stay. */
export interface WebhookPatch {
  url?: string;
  events?: WebhookEventType[];
  description?: string;
  enabled?: boolean;
}

export interface WebhookList {
  object: "list";
  data: Webhook[];
}

/** Newest first. */
export interface WebhookDeliveryList {
  object: "list";
  data: WebhookDelivery[];
}

/**
 * The body of a delivery: a durable event's fields as the stream serves
 * them, discriminated by `type`. Verify its signature over the raw bytes
 * before parsing them.
 */
export type WebhookPayload = DurableEvent extends infer E ? (E extends DurableEvent ? Omit<E, "object" | "version"> : never) : never;
