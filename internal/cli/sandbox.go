package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/internal/app"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/sandbox"
)

func newSandboxCommand() *cli.Command {
	return &cli.Command{
		Name:  "sandbox",
		Usage: "create, list, show and delete sandboxes, and read their agents' logs",
		Subcommands: []*cli.Command{
			{
				Name:  "create",
				Usage: "create a sandbox; its agent boots in the background",
				Flags: clientFlags(
					&cli.StringFlag{Name: "agent", EnvVars: []string{"SPARKLES_SANDBOX_AGENT"}, Usage: "agent to run (default: the server's default agent)"},
					&cli.StringSliceFlag{Name: "env", EnvVars: []string{"SPARKLES_SANDBOX_ENV"}, Usage: "environment variable of the agent as K=V (repeatable)"},
					&cli.StringSliceFlag{Name: "secret", EnvVars: []string{"SPARKLES_SANDBOX_SECRET"}, Usage: "secret of the agent as K=V (repeatable); its value is redacted from every event"},
					&cli.StringSliceFlag{Name: "metadata", EnvVars: []string{"SPARKLES_SANDBOX_METADATA"}, Usage: "metadata of the sandbox as K=V (repeatable)"},
					&cli.StringFlag{Name: "git", EnvVars: []string{"SPARKLES_SANDBOX_GIT"}, Usage: "clone the git repository URL[#REF] into the workspace before the agent boots (REF: a branch, tag or commit); a private one's token goes in --secret GIT_TOKEN=…"},
					&cli.IntFlag{Name: "git-depth", EnvVars: []string{"SPARKLES_SANDBOX_GIT_DEPTH"}, Usage: "commits of history to clone with --git (default 0: all of it)"},
					&cli.StringSliceFlag{Name: "mcp", EnvVars: []string{"SPARKLES_SANDBOX_MCP"}, Usage: "MCP server of the agent as NAME=COMMAND (stdio: the agent runs it, confined with it) or NAME=URL (http) (repeatable)"},
					toolOutputFlag(),
					&cli.StringFlag{Name: "mode", EnvVars: []string{"SPARKLES_SANDBOX_MODE"}, Usage: "the agent's mode to start in (one it announces: see sparkles sandbox config)"},
					&cli.StringFlag{Name: "model", EnvVars: []string{"SPARKLES_SANDBOX_MODEL"}, Usage: "the agent's model to start with (one it announces: see sparkles sandbox config)"},
					jsonFlag(),
				),
				Action: func(c *cli.Context) error {
					if _, err := positional(c, 0, 0); err != nil {
						return err
					}
					api, err := newAPIClient(c)
					if err != nil {
						return err
					}
					req := client.CreateSandboxRequest{Agent: c.String("agent"), ToolOutput: c.Bool("tool-output")}
					if mode, model := c.String("mode"), c.String("model"); mode != "" || model != "" {
						req.Config = &sandbox.ConfigChange{Mode: mode, Model: model}
					}
					for _, f := range []struct {
						name string
						dst  *map[string]string
					}{{"env", &req.Env}, {"secret", &req.Secrets}, {"metadata", &req.Metadata}} {
						if *f.dst, err = keyValues(f.name, c.StringSlice(f.name)); err != nil {
							return err
						}
					}
					if req.Source, err = gitSource(c); err != nil {
						return err
					}
					if req.MCPServers, err = mcpServers(c.StringSlice("mcp")); err != nil {
						return err
					}
					sb, err := api.CreateSandbox(c.Context, req)
					if err != nil {
						return api.describe(err)
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, sb)
					}
					return printSandbox(c.App.Writer, sb.Sandbox, sb.StreamToken)
				},
			},
			{
				Name:  "list",
				Usage: "list sandboxes, newest first (as the console does); deleted ones only with --all",
				Flags: clientFlags(jsonFlag(), &cli.BoolFlag{Name: "all", EnvVars: []string{"SPARKLES_LIST_ALL"}, Usage: "list deleted sandboxes too"}),
				Action: func(c *cli.Context) error {
					if _, err := positional(c, 0, 0); err != nil {
						return err
					}
					api, err := newAPIClient(c)
					if err != nil {
						return err
					}
					list := []sandbox.Sandbox{}
					for sb, err := range api.Sandboxes(c.Context) {
						if err != nil {
							return api.describe(err)
						}
						if sb.Status != sandbox.StatusDeleted || c.Bool("all") {
							list = append(list, sb)
						}
					}
					// The API pages in creation order; people look for the
					// sandbox they just made.
					slices.Reverse(list)
					if c.Bool("json") {
						return printJSON(c.App.Writer, list)
					}
					return printSandboxes(c.App.Writer, list)
				},
			},
			{
				Name:      "get",
				Usage:     "show a sandbox",
				ArgsUsage: "ID",
				Flags:     clientFlags(jsonFlag()),
				Action: func(c *cli.Context) error {
					sb, err := onSandbox(c, (*client.Client).GetSandbox)
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, sb)
					}
					return printSandbox(c.App.Writer, sb, "")
				},
			},
			{
				Name:      "delete",
				Usage:     "delete a sandbox: its agent stops, a running turn is canceled and its files (work, home, tmp) are removed at once; its event log follows retention",
				ArgsUsage: "ID",
				Flags:     clientFlags(jsonFlag()),
				Action: func(c *cli.Context) error {
					sb, err := onSandbox(c, (*client.Client).DeleteSandbox)
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, sb)
					}
					fmt.Fprintf(c.App.Writer, "deleted %s\n", sb.ID)
					return nil
				},
			},
			newSandboxLogsCommand(),
			newSandboxConfigCommand(),
		},
	}
}

func printSandbox(w io.Writer, sb sandbox.Sandbox, streamToken string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("id", sb.ID)
	status := sb.Status
	if sb.StatusDetail != "" {
		status += " (" + sb.StatusDetail + ")"
	}
	row("status", status)
	row("agent", sb.Agent)
	if src := sb.Source; src != nil && src.Git != nil {
		git := src.Git.URL
		if src.Git.Ref != "" {
			git += "#" + src.Git.Ref
		}
		row("source", "git "+git)
	}
	row("created", formatTime(sb.CreatedAt))
	row("updated", formatTime(sb.UpdatedAt))
	if t := sb.CurrentTurn; t != nil {
		row("current turn", t.ID+" ("+t.Status+")")
	}
	row("events", fmt.Sprintf("%d..%d (pruned through %d)", sb.OldestEventID, sb.LastEventID, sb.PrunedThrough))
	keys := make([]string, 0, len(sb.Metadata))
	for k := range sb.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		row("metadata "+k, sb.Metadata[k])
	}
	if streamToken != "" {
		row("stream token", streamToken)
	}
	return tw.Flush()
}

func printSandboxes(w io.Writer, list []sandbox.Sandbox) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATUS\tAGENT\tCURRENT TURN\tLAST EVENT\tCREATED")
	for _, sb := range list {
		turn := "-"
		if sb.CurrentTurn != nil {
			turn = sb.CurrentTurn.ID
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", sb.ID, listName(sb), sb.Status, sb.Agent, turn, sb.LastEventID, formatTime(sb.CreatedAt))
	}
	return tw.Flush()
}

// listName is what a list calls a sandbox: its metadata name, one short
// line without tabs (it is anyone's text), else the tail of its id, which
// tells apart sandboxes made in the same second.
func listName(sb sandbox.Sandbox) string {
	if n := oneLine(sanitize(sb.Metadata["name"], false), 32); n != "" {
		return n
	}
	return sb.ID[max(0, len(sb.ID)-6):]
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func keyValues(flag string, pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--%s %q: want KEY=VALUE", flag, p)
		}
		m[k] = v
	}
	return m, nil
}

// The flags and helpers below are shared by every command that calls a
// server: sandbox, prompt, events, approve, deny, cancel.

const defaultURL = "http://" + defaultAddr

func jsonFlag() cli.Flag {
	return &cli.BoolFlag{Name: "json", EnvVars: []string{"SPARKLES_JSON"}, Usage: "print JSON for scripts"}
}

// clientFlags returns the connection flags of a client command, then more.
func clientFlags(more ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "url", Value: defaultURL, EnvVars: []string{"SPARKLES_URL"}, Usage: "base URL of the sparkles server"},
		&cli.StringFlag{Name: "token", EnvVars: []string{"SPARKLES_TOKEN"}, Usage: "API token (default: for a server on this machine, the one in <data-dir>/token)"},
		&cli.StringFlag{Name: "data-dir", Value: defaultDataDir(), EnvVars: []string{"SPARKLES_DATA_DIR"}, Usage: "data dir of a local server, where its token file is"},
	}, more...)
}

// apiClient is a client of the server a command's flags name, with what
// it needs to explain a failure.
type apiClient struct {
	*client.Client
	url       string
	tokenPath string
	// tokenFrom says where the token came from, for a 401: "--token or
	// SPARKLES_TOKEN", or the token file's path.
	tokenFrom string
}

// onSandbox runs one call on the sandbox named by the command's only
// argument and describes its error for people.
func onSandbox(c *cli.Context, call func(*client.Client, context.Context, string) (sandbox.Sandbox, error)) (sandbox.Sandbox, error) {
	args, err := positional(c, 1, 1)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	api, err := newAPIClient(c)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	sb, err := call(api.Client, c.Context, args[0])
	if err != nil {
		return sandbox.Sandbox{}, api.describe(err)
	}
	return sb, nil
}

func newAPIClient(c *cli.Context) (*apiClient, error) {
	raw := c.String("url")
	u, err := parseServerURL(raw)
	if err != nil {
		return nil, err
	}
	api := &apiClient{url: raw, tokenPath: datadir.Dir(c.String("data-dir")).Token(), tokenFrom: "--token or SPARKLES_TOKEN"}
	token := c.String("token")
	if token == "" {
		if !isLocalHost(u.Hostname()) {
			return nil, fmt.Errorf("no token for the server at %s: pass --token or set SPARKLES_TOKEN (a token file is read only for a server on this machine)", raw)
		}
		// A server on this machine keeps its generated token there.
		b, err := os.ReadFile(api.tokenPath)
		token = strings.TrimSpace(string(b))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("no token found: --token and SPARKLES_TOKEN are unset and %s does not exist; start `sparkles serve` (it writes that file), pass the server's --data-dir, or pass --token", api.tokenPath)
		case err != nil:
			return nil, fmt.Errorf("no token found: --token and SPARKLES_TOKEN are unset and %s cannot be read (%v); pass --token", api.tokenPath, app.UnwrapPath(err))
		case token == "":
			return nil, fmt.Errorf("no token found: --token and SPARKLES_TOKEN are unset and %s is empty; pass --token", api.tokenPath)
		}
		api.tokenFrom = api.tokenPath
	}
	api.Client = client.New(raw, token)
	return api, nil
}

func isLocalHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// describe turns the error of a call into the one line the command ends
// with: what went wrong and what to do about it.
func (a *apiClient) describe(err error) error {
	if client.IsUnreachable(err) {
		return fmt.Errorf("no sparkles server at %s; start one with `sparkles serve` or pass --url", a.url)
	}
	var e *client.Error
	if !errors.As(err, &e) {
		return err
	}
	switch e.Type {
	case sandbox.EUnauthorized:
		if a.tokenFrom == a.tokenPath {
			return fmt.Errorf("the server at %s rejected the token in %s; pass the --data-dir of that server, or its token with --token", a.url, a.tokenPath)
		}
		return fmt.Errorf("the server rejected the token of --token or SPARKLES_TOKEN; pass the server's token (a server on this machine keeps it in %s)", a.tokenPath)
	case sandbox.EForbidden:
		return fmt.Errorf("the token may not do this (%s); pass the server's token with --token or SPARKLES_TOKEN", e.Message)
	case sandbox.ENotFound:
		if strings.HasPrefix(e.Message, "sandbox ") {
			return fmt.Errorf("%s; `sparkles sandbox list` shows the sandboxes", e.Message)
		}
		return fmt.Errorf("%s; `sparkles events SANDBOX_ID` shows its turns and approvals", e.Message)
	case sandbox.ETurnInProgress:
		return fmt.Errorf("%s; wait for it or stop it with `sparkles cancel SANDBOX_ID`", e.Message)
	case sandbox.EInternal:
		return fmt.Errorf("the server failed: %s", e.Message)
	}
	return errors.New(e.Message)
}

// positional returns the command's arguments, between min and max of them
// (max < 0: any number), and applies flags that follow them: urfave/cli
// stops parsing flags at the first argument, but `sparkles events ID
// --follow` is how people write it. After "--" everything is an argument.
func positional(c *cli.Context, min, max int) ([]string, error) {
	in := c.Args().Slice()
	cmd := c.Command.HelpName // "sparkles sandbox get"
	if cmd == "" {
		cmd = "sparkles " + c.Command.Name
	}
	var args []string
	for i := 0; i < len(in); i++ {
		a := in[i]
		if a == "--" {
			args = append(args, in[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			args = append(args, a)
			continue
		}
		flagName, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := lookupFlag(c.Command.Flags, flagName)
		if f == nil {
			return nil, usagef("unknown flag %s; see `%s --help`", a, cmd)
		}
		if _, isBool := baseFlag(f).(*cli.BoolFlag); isBool {
			if !hasValue {
				value = "true"
			}
		} else if !hasValue {
			if i+1 >= len(in) {
				return nil, usagef("flag %s needs a value; see `%s --help`", a, cmd)
			}
			i++
			value = in[i]
		}
		if err := c.Set(flagName, value); err != nil {
			return nil, usagef("invalid value %q for %s: %v; see `%s --help`", value, a, err, cmd)
		}
	}
	if len(args) < min || (max >= 0 && len(args) > max) {
		want := c.Command.ArgsUsage
		if want == "" {
			want = "no arguments"
		}
		return nil, usagef("`%s` takes %s, got %d argument(s); see `%s --help`", cmd, want, len(args), cmd)
	}
	return args, nil
}

func lookupFlag(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}
