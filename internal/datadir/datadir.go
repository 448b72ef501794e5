// Package datadir is the layout of the server's data directory, the one
// place that knows it:
//
//	<data-dir>/
//	  sparkles.db          the event store (bbolt), unless --store names NATS
//	  token                the API token, mode 0600, unless --token gives one
//	  sandboxes/<id>/      one sandbox's files, removed by retention once
//	                       the sandbox is deleted and its log dropped
//	    work/              the workspace: the agent's working directory, and
//	                       what the files API reads and writes
//	    home/, tmp/        a confined agent's HOME and TMPDIR
//	    snapshots/         what each turn changed, private to the server
//	    agent.log          the agent's stderr (agent.log.1 the one before)
//	    source             a clone's outcome: "done" or "failed: <why>"
//	  checks/<name>/       the scratch sandbox of an agents check, laid out
//	                       as one under sandboxes/ and removed after it (or
//	                       by the next start, if the server stopped during it)
//
// A start also makes and removes scratch files at the top (.write-check-*,
// .confine-probe-*). A probe's directory that a server stopped or killed
// while its probe ran left behind is removed by the next start's probe.
// Nothing here touches the disk: the packages that write these paths make
// them.
package datadir

import "path/filepath"

// Dir is a data directory.
type Dir string

// Store is the bbolt file of the event store.
func (d Dir) Store() string { return filepath.Join(string(d), "sparkles.db") }

// Token is the file that keeps the API token.
func (d Dir) Token() string { return filepath.Join(string(d), "token") }

// Sandboxes holds a directory per sandbox, named by its id.
func (d Dir) Sandboxes() string { return filepath.Join(string(d), "sandboxes") }

// Sandbox is the directory of sandbox id.
func (d Dir) Sandbox(id string) Sandbox { return Sandbox(filepath.Join(d.Sandboxes(), id)) }

// Checks holds the scratch sandboxes of agents checks.
func (d Dir) Checks() string { return filepath.Join(string(d), "checks") }

// Check is the scratch sandbox of the agents check name.
func (d Dir) Check(name string) Sandbox { return Sandbox(filepath.Join(d.Checks(), name)) }

// Sandbox is the directory of one sandbox.
type Sandbox string

// Work is the sandbox's workspace, the agent's working directory.
func (s Sandbox) Work() string { return filepath.Join(string(s), "work") }

// Home is a confined agent's HOME.
func (s Sandbox) Home() string { return filepath.Join(string(s), "home") }

// Tmp is a confined agent's TMPDIR.
func (s Sandbox) Tmp() string { return filepath.Join(string(s), "tmp") }

// Snapshots is the store of what each turn changed in Work.
func (s Sandbox) Snapshots() string { return filepath.Join(string(s), "snapshots") }

// AgentLog is the file of the agent's stderr.
func (s Sandbox) AgentLog() string { return filepath.Join(string(s), "agent.log") }

// Source keeps the outcome of cloning the sandbox's source into Work.
func (s Sandbox) Source() string { return filepath.Join(string(s), "source") }
