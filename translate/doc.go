// Package translate turns the raw ACP traffic of one agent session into the
// curated public events of a sandbox, and redacts credentials and the
// server's absolute paths from every string it lets out.
//
// A Translator is pure: it does no I/O (but for making its two directories
// absolute and resolving their symlinks, once, in New), starts no goroutines
// and owns no timers. The coordinator feeds it session/update params, permission
// requests and turn boundaries; the Translator answers with events, and tells
// through NextFlush when coalesced text is due so the caller can arm its own
// timer and call Flush.
//
// Curation: every payload is built field by field from an allow-list. The
// agent's sessionId, messageId and toolCallId, JSON-RPC ids, rawInput,
// rawOutput, tool content (diffs, terminal output), _meta and any field this
// package does not know are never copied; the agent's ids are mapped to ids of
// our own (msg_, part_, tool_, appr_, opt_N). The one exception is the text
// of a command's terminal output, read (from _meta, or codex-acp's rawOutput
// aggregated_output with the exit) only with Config.ToolOutput and curated
// into tool.output: escape sequences and control bytes stripped, redacted,
// its last 16 KiB (tooloutput.go).
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
//   - Paths: in every string that leaves (message text, titles, option
//     labels, error messages, the turn's input) an absolute path under the
//     sandbox's working directory (Config.Dir, the agent's cwd) is rewritten
//     relative to it: "…/work/src/a.go:12" reads "src/a.go:12", the
//     directory itself ".", or "./" before a full stop, so that it does not
//     read "..". Any other absolute path under the data directory
//     (Config.DataDir: another sandbox, this sandbox's private HOME, the
//     token, the database) is replaced whole by DataDirPlaceholder,
//     "[data-dir]", so no host layout, sandbox id or file name of it shows.
//     Both directories are matched as given and symlink-resolved, and in
//     any spelling with repeated slashes or "." segments
//     ("//srv//data/./token" is the data dir's token; ".." is kept, so
//     "…/work/../home" reads "../home" however it is spelled). A path
//     starts at the start of the text, after a slash (file:///…) or after
//     a byte that is not part of a name, and ends at whitespace, a quote, a
//     bracket, shell punctuation, ':' or '=' or any non-ASCII byte; a root
//     inside a longer name ("/srv/data" of "/srv/database" or
//     "/mnt/srv/data") is no match. Tool locations are made relative the
//     same way, and left out when outside the working directory.
//   - While a part is open its snapshots stop before any trailing text that
//     could still grow into a secret, a token or a path to rewrite (a proper
//     prefix of a secret, "sk-ab", "Bearer ", an unfinished private key
//     block, "/srv/da", a path under a root not yet ended); that text shows
//     once it is complete, or when the part closes. A closed part shows all
//     it holds: a secret the agent splits around a tool call shows in
//     pieces in the two parts, and the joined text of message.completed
//     keeps the pieces a blank line apart (it is redacted again all the
//     same, for a secret that holds a blank line).
//   - message.completed is the final assistant message of the turn, at most
//     one per turn: the message of the last text part that is not blank
//     (its id is the agent's messageId mapped to ours; chunks without one
//     stay in the message before them, so an agent that sends none has one
//     message per turn). Parts of earlier messages remain message.updated
//     events only. Its parts are all the parts of that message, reasoning
//     included; its text joins the message's text parts that are not blank
//     with one blank line ("\n\n", the newlines on either side of each join
//     dropped). A turn with no text that is not blank (only reasoning, or
//     nothing) has no message.completed. FinalMessage is the rule, for
//     whoever completes a turn from its stored parts.
//   - Usage: turn.completed.usage holds the token counts of the
//     session/prompt answer (TurnResult.Usage) and, when the agent sent
//     usage_update during the turn, the last one's context window as
//     context_tokens and context_window and its cost; null when there was
//     neither. ACP's usage_update carries the context window (used, size)
//     and a cumulative cost, not the tokens a turn spent (codex-acp 0.16.0
//     sends it, with used = the last model call's total tokens, and no
//     usage in its prompt answer), so it never passes for token counts.
//     During the turn it becomes turn.usage, coalesced like
//     message.updated: at most one per flush interval, none when the
//     figures did not change, and none left waiting once turn.completed
//     carries the last figures. Each field is kept only when it makes
//     sense: counts not negative, a cost not negative in a currency of
//     three letters (upper-cased); a cost that makes none is counted as
//     "malformed" and the last one kept.
//   - A message part holds at most MaxPartBytes of text; the rest is dropped
//     and counted as "truncated". Parts larger than 64 KiB are emitted less
//     often (the flush interval grows with the part's size), which keeps the
//     bytes written per second bounded while every snapshot stays whole.
package translate
