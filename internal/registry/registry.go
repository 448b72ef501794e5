// Package registry is the server's list of agents (docs/agents.md): for each name a
// sandbox may ask for, the command that runs it, its arguments and the
// environment its processes get. It reads the agents file (`serve
// --agents-file`, shaped as Zed's agent_servers settings) and the `--agent
// NAME=COMMAND` flags, and tells whether a command resolves on this machine.
// It imports nothing of ours.
package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Agent is one registered agent.
type Agent struct {
	// Command is the program: an absolute path, or a name looked up on
	// the server's PATH.
	Command string   `json:"command"`
	Args    []string `json:"args,omitempty"`
	// Env is set in the agent's processes. The operator writes it, so it
	// may set what a sandbox's env may not (NODE_OPTIONS, LD_*…): see
	// docs/agents.md (which value wins) and docs/security.md.
	Env map[string]string `json:"env,omitempty"`
	// PassEnv names variables of the server's own environment handed to
	// the agent as they are (a key kept out of the file, a proxy setting).
	PassEnv []string `json:"pass_env,omitempty"`

	// Confinement of the agent's processes: the network it may reach and
	// the host paths it may read and write beyond its sandbox. They are
	// read and kept so that a file written for them loads, and the agent
	// launcher is where they take effect.
	Network    string   `json:"network,omitempty"`
	ReadPaths  []string `json:"read_paths,omitempty"`
	WritePaths []string `json:"write_paths,omitempty"`
	// HostPorts are TCP ports of the host's loopback the agent may reach
	// (its model API on the host, a local proxy), beyond the server's
	// --agent-host-port ones.
	HostPorts []int `json:"host_ports,omitempty"`

	// MCP says which MCP server transports a sandbox of this agent may be
	// given (mcp.go); MCPCommands, when set, are the only commands a stdio
	// one may run.
	MCP         *MCPPolicy `json:"mcp,omitempty"`
	MCPCommands []string   `json:"mcp_commands,omitempty"`
}

// Argv is the agent's command line.
func (a Agent) Argv() []string { return append([]string{a.Command}, a.Args...) }

// Confined reports whether the agent asks for any confinement setting.
func (a Agent) Confined() bool {
	return a.Network != "" || len(a.ReadPaths) > 0 || len(a.WritePaths) > 0 || len(a.HostPorts) > 0
}

// Environ returns the variables the registry gives the agent: its env,
// then the pass_env variables that lookup finds (the server's environment,
// os.LookupEnv), which win over env. A pass_env variable the server does
// not have is left out, so env's value, if any, stays.
func (a Agent) Environ(lookup func(string) (string, bool)) map[string]string {
	out := maps.Clone(a.Env)
	if out == nil {
		out = map[string]string{}
	}
	for _, k := range a.PassEnv {
		if v, ok := lookup(k); ok {
			out[k] = v
		}
	}
	return out
}

// Available reports whether the command resolves to an executable file:
// an absolute path as it is, a name on the PATH the agent would get from
// the registry (env or pass_env), else on the server's own PATH.
func (a Agent) Available() bool {
	if strings.ContainsRune(a.Command, filepath.Separator) {
		return isExecutable(a.Command)
	}
	// The server's PATH, as the agent is started: never one an
	// environment sets (see agent's lookPath).
	_, err := exec.LookPath(a.Command)
	return err == nil
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// Registry maps agent names to agents.
type Registry map[string]Agent

// Names lists the registered names, sorted.
func (r Registry) Names() []string { return slices.Sorted(maps.Keys(r)) }

// fieldNames are the fields of an agent in the file, for error messages.
const fieldNames = "command, args, env, pass_env, network, read_paths, write_paths, host_ports, mcp, mcp_commands"

var (
	nameRe = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	})
	// envName is what a variable name may be: a key such as "A=B" would
	// smuggle a second variable into the agent's environment.
	envName = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	})
)

// Load reads the agents file at path. Every error is one line that names
// the file and, where it applies, the agent and the field.
func Load(path string) (Registry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("agents file %s: cannot read it (%v); pass the path of a JSON file such as {\"agents\": {\"NAME\": {\"command\": \"…\"}}}", path, err)
	}
	r, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("agents file %s: %w", path, err)
	}
	return r, nil
}

// Parse reads an agents file's content: {"agents": {NAME: Agent, …}}.
// Unknown fields are refused, at the top as in each agent, so that a typo
// is an error at start rather than a setting silently not applied.
func Parse(data []byte) (Registry, error) {
	var top struct {
		Agents json.RawMessage `json:"agents"`
	}
	if err := strictDecode(data, &top); err != nil {
		return nil, describe(data, "", err)
	}
	if len(top.Agents) == 0 || bytes.Equal(top.Agents, []byte("null")) {
		return nil, errors.New(`it has no "agents" object; write {"agents": {"NAME": {"command": "…"}}}`)
	}
	names, err := objectKeys(top.Agents)
	if err != nil {
		return nil, describe(top.Agents, "", fmt.Errorf(`"agents" %w`, err))
	}
	var raws map[string]json.RawMessage
	if err := json.Unmarshal(top.Agents, &raws); err != nil {
		return nil, describe(top.Agents, "", err)
	}
	r := Registry{}
	for _, name := range names {
		if _, dup := r[name]; dup {
			return nil, fmt.Errorf("agent %q is defined twice; keep one", name)
		}
		if !nameRe().MatchString(name) {
			return nil, fmt.Errorf("agent name %q: use 1 to 64 letters, digits, '.', '_' and '-', starting with a letter or digit", name)
		}
		var a Agent
		if err := strictDecode(raws[name], &a); err != nil {
			return nil, describe(raws[name], name, err)
		}
		if err := a.check(); err != nil {
			return nil, fmt.Errorf("agent %q: %w", name, err)
		}
		r[name] = a
	}
	return r, nil
}

// strictDecode decodes one JSON value into v, refusing unknown fields and
// anything after the value.
func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected content after the JSON value")
	}
	return nil
}

// objectKeys returns the keys of a JSON object in order, duplicates
// included (encoding/json keeps the last silently).
func objectKeys(data []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("must be an object mapping names to agents")
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// describe turns a decoding error into one line that says where and what.
func describe(data []byte, agent string, err error) error {
	where := ""
	if agent != "" {
		where = fmt.Sprintf("agent %q: ", agent)
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		line, col := position(data, syn.Offset)
		return fmt.Errorf("%sline %d, column %d: %s", where, line, col, strings.TrimPrefix(syn.Error(), "json: "))
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			if agent == "" {
				return errors.New(`it must be a JSON object: {"agents": {"NAME": {"command": "…"}}}`)
			}
			return fmt.Errorf("%smust be an object with %s", where, fieldNames)
		}
		return fmt.Errorf("%s%s: want %s, not a JSON %s", where, field, wantOf(field), typ.Value)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%sthe JSON ends too early", where)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.TrimPrefix(err.Error(), "json: unknown field ")
		if agent == "" {
			return fmt.Errorf(`unknown field %s at the top; the file has one field, "agents"`, field)
		}
		return fmt.Errorf("%sunknown field %s; an agent has %s", where, field, fieldNames)
	}
	return fmt.Errorf("%s%s", where, strings.TrimPrefix(err.Error(), "json: "))
}

func wantOf(field string) string {
	switch strings.SplitN(field, ".", 2)[0] {
	case "args", "pass_env", "read_paths", "write_paths", "mcp_commands":
		return "a list of strings"
	case "env":
		return "an object of string values"
	case "host_ports":
		return "a list of port numbers"
	case "mcp":
		return `an object such as {"stdio": true, "http": false}`
	case "agents":
		return "an object mapping names to agents"
	}
	return "a string"
}

// position is the 1-based line and column of byte offset off.
func position(data []byte, off int64) (line, col int) {
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(off) - (bytes.LastIndexByte(before, '\n') + 1)
	return line, max(col, 1)
}

// check validates an agent; its error names the field.
func (a Agent) check() error {
	if strings.TrimSpace(a.Command) == "" {
		return errors.New(`command is missing; give the program to run, e.g. "command": "claude-agent-acp"`)
	}
	if err := checkCommand(a.Command); err != nil {
		return err
	}
	for i, s := range a.Args {
		if strings.ContainsRune(s, 0) {
			return fmt.Errorf("args[%d] holds a NUL byte", i)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(a.Env)) {
		if !envName().MatchString(k) {
			return fmt.Errorf("env key %q is not a variable name: use letters, digits and _, not starting with a digit", k)
		}
		if strings.ContainsRune(a.Env[k], 0) {
			return fmt.Errorf("env[%q] holds a NUL byte", k)
		}
	}
	for i, k := range a.PassEnv {
		if !envName().MatchString(k) {
			return fmt.Errorf("pass_env[%d] %q is not a variable name: use letters, digits and _, not starting with a digit", i, k)
		}
	}
	if strings.ContainsRune(a.Network, 0) {
		return errors.New("network holds a NUL byte")
	}
	for i, p := range a.HostPorts {
		if p < 1 || p > 65535 {
			return fmt.Errorf("host_ports[%d] %d: want a TCP port from 1 to 65535", i, p)
		}
	}
	for _, f := range []struct {
		name  string
		paths []string
	}{{"read_paths", a.ReadPaths}, {"write_paths", a.WritePaths}} {
		for i, p := range f.paths {
			if p == "" || strings.ContainsRune(p, 0) {
				return fmt.Errorf("%s[%d] is empty or holds a NUL byte", f.name, i)
			}
		}
	}
	for i, c := range a.MCPCommands {
		if strings.TrimSpace(c) == "" || strings.ContainsRune(c, 0) {
			return fmt.Errorf("mcp_commands[%d] is empty or holds a NUL byte", i)
		}
	}
	return nil
}

// checkCommand refuses a relative path: the agent starts in its sandbox
// directory, where a relative path would run whatever the sandbox holds.
func checkCommand(c string) error {
	if strings.ContainsRune(c, 0) {
		return errors.New("command holds a NUL byte")
	}
	if strings.ContainsRune(c, filepath.Separator) && !filepath.IsAbs(c) {
		return fmt.Errorf("command %q is a relative path; give an absolute path or a bare name to find on PATH", c)
	}
	return nil
}
