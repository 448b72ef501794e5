package coordinator

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"sync"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/translate"
)

// maxMCPServers bounds the MCP servers of one sandbox: each is a process
// or a connection of its agent, and every tool they list is in each
// request the agent makes to its model.
const maxMCPServers = 16

var (
	// mcpName is what a server's name may be: agents build tool names
	// from it (Claude Code's mcp__NAME__TOOL), which allow no more.
	mcpName = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	})
	// headerName is an HTTP field name (RFC 9110 token).
	headerName = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	})
)

// checkMCPServers validates the MCP servers of a create request for agent
// name, as far as the registry knows it. Whether the agent takes http or
// sse is known only once it answers initialize; a boot that finds it does
// not fails with a status_detail naming the capability (agent.MCPError).
func (c *Coordinator) checkMCPServers(name string, servers []sandbox.MCPServerConfig) error {
	if len(servers) > maxMCPServers {
		return sandbox.Errorf(sandbox.EInvalidRequest, "mcp_servers has %d servers; at most %d are allowed", len(servers), maxMCPServers)
	}
	reg := c.cfg.Agents[name] // a builtin has no entry, and no policy
	seen := map[string]bool{}
	for i, s := range servers {
		field := fmt.Sprintf("mcp_servers[%d]", i)
		if !mcpName().MatchString(s.Name) {
			return sandbox.Errorf(sandbox.EInvalidRequest, "%s.name %q: use 1 to 64 letters, digits, '.', '_' and '-', starting with a letter or digit", field, s.Name)
		}
		if seen[s.Name] {
			return sandbox.Errorf(sandbox.EInvalidRequest, "%s.name %q is given twice; MCP server names must be unique", field, s.Name)
		}
		seen[s.Name] = true
		field = fmt.Sprintf("mcp_servers[%q]", s.Name)
		var err error
		switch s.Type {
		case "", sandbox.MCPStdio:
			err = checkMCPStdio(field, s)
		case sandbox.MCPHTTP, sandbox.MCPSSE:
			err = checkMCPRemote(field, s)
		default:
			err = sandbox.Errorf(sandbox.EInvalidRequest, "%s.type %q: want stdio (or none), http or sse", field, s.Type)
		}
		if err != nil {
			return err
		}
		if err := reg.MCPAllows(s.Transport(), s.Command); err != nil {
			return sandbox.Errorf(sandbox.EInvalidRequest, "%s: agent %q: %v", field, name, err)
		}
	}
	return nil
}

func checkMCPStdio(field string, s sandbox.MCPServerConfig) error {
	if s.URL != "" || len(s.Headers) > 0 {
		return sandbox.Errorf(sandbox.EInvalidRequest, "%s: a stdio server has a command, args and env; url and headers are for type http or sse", field)
	}
	if strings.TrimSpace(s.Command) == "" {
		return sandbox.Errorf(sandbox.EInvalidRequest, "%s.command is empty; give the program the agent runs", field)
	}
	if len(s.Command) > maxKeyLen || strings.ContainsRune(s.Command, 0) {
		return sandbox.Errorf(sandbox.EInvalidRequest, "%s.command must be at most %d bytes, without NUL", field, maxKeyLen)
	}
	if len(s.Args) > maxMapEntries {
		return sandbox.Errorf(sandbox.EInvalidRequest, "%s.args has %d entries; at most %d are allowed", field, len(s.Args), maxMapEntries)
	}
	for i, a := range s.Args {
		if len(a) > maxValueLen || strings.ContainsRune(a, 0) {
			return sandbox.Errorf(sandbox.EInvalidRequest, "%s.args[%d] must be at most %d bytes, without NUL", field, i, maxValueLen)
		}
	}
	if err := checkMap(field+".env", s.Env); err != nil {
		return err
	}
	return checkEnv(field+".env", s.Env)
}

func checkMCPRemote(field string, s sandbox.MCPServerConfig) error {
	if s.Command != "" || len(s.Args) > 0 || len(s.Env) > 0 {
		return sandbox.Errorf(sandbox.EInvalidRequest, "%s: an %s server has a url and headers; command, args and env are for stdio", field, s.Type)
	}
	u, err := url.Parse(s.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || len(s.URL) > maxValueLen {
		return sandbox.Errorf(sandbox.EInvalidRequest, "%s.url must be an absolute http or https URL", field)
	}
	if u.User != nil {
		return sandbox.Errorf(sandbox.EInvalidRequest, "%s.url holds credentials; give them in headers, whose values are kept secret", field)
	}
	if err := checkMap(field+".headers", s.Headers); err != nil {
		return err
	}
	for k, v := range s.Headers {
		if !headerName().MatchString(k) {
			return sandbox.Errorf(sandbox.EInvalidRequest, "%s.headers key %q is not an HTTP header name", field, k)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return sandbox.Errorf(sandbox.EInvalidRequest, "%s.headers[%q] holds a line break or NUL byte", field, k)
		}
	}
	return nil
}

// mcpSecrets are the values of the servers' env and headers, to redact as
// the sandbox's secrets are; of a header such as "Bearer KEY", KEY alone
// too, as the agent may print it without its scheme.
func mcpSecrets(servers []sandbox.MCPServerConfig) []string {
	var out []string
	for _, s := range servers {
		for _, v := range s.Env {
			out = append(out, v)
		}
		for _, v := range s.Headers {
			out = append(out, v)
			if f := strings.Fields(v); len(f) == 2 {
				out = append(out, f[1])
			}
		}
	}
	return out
}

// withMCPSecrets returns secrets with the servers' secret values added
// under keys no variable name can have, for redactions.
func withMCPSecrets(secrets map[string]string, servers []sandbox.MCPServerConfig) map[string]string {
	vals := mcpSecrets(servers)
	if len(vals) == 0 {
		return secrets
	}
	out := make(map[string]string, len(secrets)+len(vals))
	for k, v := range secrets {
		out[k] = v
	}
	for i, v := range vals {
		out[fmt.Sprintf("mcp:%d", i)] = v
	}
	return out
}

// secrets are the values redacted from every string of the sandbox beyond
// the server's own: its secrets and its MCP servers' env and headers.
func (cfg config) secrets() map[string]string { return withMCPSecrets(cfg.Secrets, cfg.MCPServers) }

// publicMCPServers is how the resource shows the servers: without values,
// and with what the caller wrote (command, args, url) redacted as metadata
// is, since a URL or an argument may carry a credential.
func (c *Coordinator) publicMCPServers(id string, servers []sandbox.MCPServerConfig, secrets map[string]string) []sandbox.MCPServer {
	if len(servers) == 0 {
		return nil
	}
	red := translate.NewRedactor(c.redactions(id, withMCPSecrets(secrets, servers)))
	out := make([]sandbox.MCPServer, len(servers))
	for i, s := range servers {
		p := s.Public()
		p.Command, p.URL = red(p.Command), red(p.URL)
		for j := range p.Args {
			p.Args[j] = red(p.Args[j])
		}
		out[i] = p
	}
	return out
}

// agentMCPServers are the servers as the agent is given them.
func (cfg config) agentMCPServers() []agent.MCPServer {
	if len(cfg.MCPServers) == 0 {
		return nil
	}
	out := make([]agent.MCPServer, len(cfg.MCPServers))
	for i, s := range cfg.MCPServers {
		t := s.Type
		if t == sandbox.MCPStdio {
			t = ""
		}
		out[i] = agent.MCPServer{Name: s.Name, Type: t, Command: s.Command, Args: s.Args, Env: s.Env, URL: s.URL, Headers: s.Headers}
	}
	return out
}
