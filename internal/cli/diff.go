package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/sparkles-dev/sparkles/sandbox"
)

func newDiffCommand() *cli.Command {
	return &cli.Command{
		Name:      "diff",
		Usage:     "show what a turn changed in the workspace, as git diff does",
		ArgsUsage: "[SANDBOX_ID] [TURN_ID]",
		Description: "Prints the unified diff of TURN_ID, by default the last finished turn, of the sandbox named,\n" +
			"else of --sandbox (SPARKLES_SANDBOX), else of the newest sandbox. Binary files are named, not\n" +
			"diffed. On a terminal it is coloured like git diff (unless NO_COLOR is set or TERM=dumb) and\n" +
			"cleared of control characters; through a pipe it is the server's diff byte for byte, so\n" +
			"`sparkles diff … | git apply` works.",
		Flags: clientFlags(sandboxFlag()),
		Action: func(c *cli.Context) error {
			args, err := positional(c, 0, 2)
			if err != nil {
				return err
			}
			id, turnID, err := sandboxAndTurn(c, args)
			if err != nil {
				return err
			}
			api, err := newAPIClient(c)
			if err != nil {
				return err
			}
			if id, err = chooseSandbox(c, api, id); err != nil {
				return err
			}
			if turnID == "" {
				if turnID, err = lastFinishedTurn(c.Context, api, id, c.App.ErrWriter); err != nil {
					return err
				}
			}
			diff, err := api.Diff(c.Context, id, turnID)
			if err != nil {
				return api.describe(err)
			}
			if diff == "" {
				fmt.Fprintf(c.App.ErrWriter, "sparkles: turn %s changed no file\n", turnID)
				return nil
			}
			return writeDiff(c.App.Writer, diff, colorOut(c.App.Writer))
		},
	}
}

func newRevertCommand() *cli.Command {
	return &cli.Command{
		Name:      "revert",
		Usage:     "put a sandbox's workspace back as it was when a turn started",
		ArgsUsage: "[SANDBOX_ID] TURN_ID",
		Description: "Undoes what TURN_ID and every later turn changed in the workspace. It is refused while a turn\n" +
			"runs. The log records it as a workspace.reverted event; the agent's conversation is not undone.",
		Flags: clientFlags(sandboxFlag(), jsonFlag()),
		Action: func(c *cli.Context) error {
			args, err := positional(c, 1, 2)
			if err != nil {
				return err
			}
			id, turnID, err := sandboxAndTurn(c, args)
			if err != nil {
				return err
			}
			if turnID == "" {
				return usagef("`sparkles revert` takes the turn to revert, TURN_ID (turn_…); `sparkles events SANDBOX_ID` shows the turns")
			}
			api, err := newAPIClient(c)
			if err != nil {
				return err
			}
			if id, err = chooseSandbox(c, api, id); err != nil {
				return err
			}
			sb, err := api.Revert(c.Context, id, turnID)
			if err != nil {
				return api.describe(err)
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, sb)
			}
			fmt.Fprintf(c.App.Writer, "reverted %s: the workspace is as it was when turn %s started\n", sb.ID, turnID)
			return nil
		},
	}
}

// sandboxAndTurn sorts the arguments of diff and revert by their
// prefixes: c_… a sandbox, turn_… a turn.
func sandboxAndTurn(c *cli.Context, args []string) (id, turnID string, err error) {
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, sandbox.PrefixSandbox) && id == "":
			id = a
		case strings.HasPrefix(a, sandbox.PrefixTurn) && turnID == "":
			turnID = a
		default:
			return "", "", usagef("%q is neither a sandbox id (c_…) nor a turn id (turn_…); see `%s --help`", a, c.Command.HelpName)
		}
	}
	return id, turnID, nil
}

// lastFinishedTurn finds the last turn.completed of a sandbox's log,
// reading back from its end in growing windows: a long log is not read
// whole for its last turn.
func lastFinishedTurn(ctx context.Context, api *apiClient, id string, errw io.Writer) (string, error) {
	sb, err := api.GetSandbox(ctx, id)
	if err != nil {
		return "", api.describe(err)
	}
	last, floor := uint64(sb.LastEventID), uint64(sb.PrunedThrough)
	hi, window := last, uint64(256)
	for {
		since := floor
		if hi > floor+window {
			since = hi - window
		}
		var found string
		for cur := since; ; {
			page, err := api.Events(ctx, id, cur, 1000)
			if err != nil {
				return "", api.describe(err)
			}
			for _, ev := range page.Events {
				if uint64(ev.ID) <= hi && ev.Type == sandbox.TypeTurnCompleted {
					found = ev.TurnID
				}
			}
			if !page.HasMore || page.NextSince >= hi || page.NextSince <= cur {
				break
			}
			cur = page.NextSince
		}
		if found != "" {
			if t := sb.CurrentTurn; t != nil && !t.Done() {
				fmt.Fprintf(errw, "sparkles: turn %s is still running; this is the diff of turn %s, the last finished one\n", t.ID, found)
			}
			return found, nil
		}
		if since <= floor {
			if t := sb.CurrentTurn; t != nil {
				return "", fmt.Errorf("sandbox %s has no finished turn yet: turn %s is %s", id, t.ID, t.Status)
			}
			return "", fmt.Errorf("sandbox %s has no finished turn in its log", id)
		}
		hi, window = since, window*4
	}
}

// colorOut reports whether w is a terminal that takes colours, by the
// same rules as prompt's renderer.
func colorOut(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd())) && os.Getenv("TERM") != "dumb" && os.Getenv("NO_COLOR") == ""
}

// writeDiff writes a unified diff, coloured as git colours it when color
// is set: the lines that name a file bold, hunk headers cyan, removed
// lines red, added lines green. A coloured diff is for a terminal, so it
// is also cleared of the control characters a file's content may hold.
func writeDiff(w io.Writer, diff string, color bool) error {
	if !color {
		_, err := io.WriteString(w, diff)
		return err
	}
	bw := bufio.NewWriter(w)
	header := false // between a "diff --git" line and its first hunk
	for line := range strings.Lines(diff) {
		text := sanitize(strings.TrimSuffix(line, "\n"), false)
		switch {
		case strings.HasPrefix(line, "diff --git "):
			header = true
			text = sgr(sgrBold, text)
		case header && !strings.HasPrefix(line, "@@"):
			if !strings.HasPrefix(line, "Binary files ") {
				text = sgr(sgrBold, text)
			}
		case strings.HasPrefix(line, "@@"):
			header = false
			// Like git: the range in cyan, the context after it plain.
			if i := strings.Index(text[2:], "@@"); i >= 0 {
				text = sgr(sgrCyan, text[:i+4]) + text[i+4:]
			} else {
				text = sgr(sgrCyan, text)
			}
		case strings.HasPrefix(line, "+"):
			text = sgr(sgrGreen, text)
		case strings.HasPrefix(line, "-"):
			text = sgr(sgrRed, text)
		}
		bw.WriteString(text)
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

func sgr(code, s string) string { return "\x1b[" + code + "m" + s + reset }

// changesLine sums up what a turn changed for its closing summary: "2
// files changed: + notes.txt, ~ main.go", at most maxNamed names and
// then how many more; "" when the turn changed nothing or its changes
// were not recorded. style colours each mark.
func changesLine(ch *sandbox.Changes, style func(sgr, s string) string) string {
	if ch == nil {
		return ""
	}
	total := ch.Added + ch.Modified + ch.Deleted
	if total == 0 {
		return ""
	}
	const maxNamed = 5
	var names []string
	for _, f := range ch.Files {
		if len(names) == maxNamed {
			break
		}
		mark, code := "~", sgrYellow
		switch f.Change {
		case sandbox.ChangeAdded:
			mark, code = "+", sgrGreen
		case sandbox.ChangeDeleted:
			mark, code = "-", sgrRed
		}
		names = append(names, style(code, mark)+" "+sanitize(oneLine(f.Path, 80), true))
	}
	noun := "files"
	if total == 1 {
		noun = "file"
	}
	line := fmt.Sprintf("%d %s changed", total, noun)
	if len(names) > 0 {
		line += ": " + strings.Join(names, ", ")
	}
	if more := total - len(names); more > 0 && len(names) > 0 {
		line += fmt.Sprintf(", …and %d more", more)
	}
	return line
}
