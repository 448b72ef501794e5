// Package sandbox is the domain of Sparkles: the public event envelope and its
// typed payloads, the Sandbox, Turn and Approval resources, a workspace's
// entries and the Files they are served from, the error vocabulary of the
// HTTP API, and the fold that turns a log of events into the state a snapshot
// shows. It imports nothing of ours, so every other package can speak in its
// terms.
package sandbox
