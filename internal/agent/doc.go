// Package agent drives one agent process over the Agent Client Protocol (ACP
// v1): newline-delimited JSON-RPC 2.0 on the agent's stdin and stdout, with
// this package in the role of the ACP client.
//
// Start spawns the agent in its sandbox directory, negotiates the protocol and
// opens a session. From then on everything the agent says that the caller must
// act on (session updates, permission requests, the end of a prompt, the end
// of the process) arrives in order on one bounded channel, Conn.Inbox. Requests
// the package can answer by itself, reading and writing files confined to the
// sandbox directory, never reach the caller.
//
// The package also holds the demo agent (RunDemo): a scripted ACP agent with
// no model behind it, so that the whole system can run and be tested offline.
// Config.Run drives such an agent in this process, over the same pipes and
// the same client code as a process.
package agent
