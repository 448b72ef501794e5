// Package translate turns the raw ACP traffic of one agent session into the
// curated public events of a sandbox, and redacts credentials from every
// string it lets out.
//
// A Translator is pure: it does no I/O, starts no goroutines and owns no
// timers. The coordinator feeds it session/update params, permission
// requests and turn boundaries; the Translator answers with events, and tells
// through NextFlush when coalesced text is due so the caller can arm its own
// timer and call Flush.
//
// Curation: every payload is built field by field from an allow-list. The
// agent's sessionId, messageId and toolCallId, JSON-RPC ids, rawInput,
// rawOutput, tool content (diffs, terminal output), _meta and any field this
// package does not know are never copied; the agent's ids are mapped to ids of
// our own (msg_, part_, tool_, appr_, opt_N).
//
// Decisions where the protocol or the contract leave room:
//
//   - Updates outside a turn (before the first turn, or after EndTurn: real
//     agents send late tool_call_update or chunks after they answered
//     session/prompt) produce no event and are counted as "outside_turn".
//     A turn's events end with its turn.completed, so a late update cannot
//     change what a reader saw as the final state of that turn.
//   - Permission requests outside a turn, or with no option we understand,
//     produce no approval: RequestPermission returns a Pending with an empty
//     ApprovalID and the caller answers the agent "cancelled".
//   - Sandbox secret values shorter than MinSecretLen bytes are not redacted:
//     replacing every "a" or "id" in the text would destroy it while
//     protecting nothing a person would call a credential.
//   - An unknown ACP stopReason ends the turn as succeeded with stop_reason
//     end_turn: a newer agent may add reasons, and the turn did end normally.
//     A prompt that never answered (empty stopReason) without an error is a
//     failed turn with error code internal.
//   - When a turn ends, tools still pending or running are settled: canceled
//     in a canceled turn, failed in a failed turn; in a succeeded turn a tool
//     still pending never ran (canceled) and a tool still running is taken as
//     completed, since the agent declared itself done with the turn (the
//     completion some agents report after their prompt answer is dropped as
//     outside the turn).
//   - While a part is open its snapshots stop before any trailing text that
//     could still grow into a secret or a token (a proper prefix of a
//     secret, "sk-ab", "Bearer ", an unfinished private key block); that
//     text shows once it is complete, or when the part closes. A closed part
//     shows all it holds: a secret the agent splits around a tool call
//     shows in pieces in the two parts, but message.completed's joined text
//     is redacted again as a whole.
//   - A message part holds at most MaxPartBytes of text; the rest is dropped
//     and counted as "truncated". Parts larger than 64 KiB are emitted less
//     often (the flush interval grows with the part's size), which keeps the
//     bytes written per second bounded while every snapshot stays whole.
package translate
