package cli

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/urfave/cli/v2"
)

// exitUsage is the exit status of a command line the CLI cannot run (an
// unknown command or flag, a missing argument, a malformed value): 64, as
// BSD's sysexits.h names EX_USAGE. It is apart from the statuses of turns
// (1 failed, 2 canceled, 3 succeeded with a denial), so a script can tell a
// typo from a turn's outcome.
const exitUsage = 64

// usageError is a command line the CLI cannot run; main prints it and exits
// with exitUsage.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// withUsage makes every command of the tree report its usage errors as one
// line that points to its --help, instead of urfave/cli's default of the
// error followed by the whole help text, and makes every command that only
// groups others refuse a name it does not know.
func withUsage(app *cli.App) *cli.App {
	app.OnUsageError = onUsageError
	app.Action = unknownCommand(nil)
	var walk func(cmds []*cli.Command)
	walk = func(cmds []*cli.Command) {
		for _, cmd := range cmds {
			cmd.OnUsageError = onUsageError
			// Without a help subcommand, `sparkles prompt help` is the
			// prompt "help", as people mean it.
			cmd.HideHelpCommand = true
			if len(cmd.Subcommands) > 0 && cmd.Action == nil {
				cmd.Action = unknownCommand(cmd)
			}
			walk(cmd.Subcommands)
		}
	}
	walk(app.Commands)
	return app
}

// onUsageError rewrites urfave/cli's flag parsing errors ("flag provided
// but not defined: -x") in the words positional uses.
func onUsageError(c *cli.Context, err error, _ bool) error {
	help := "sparkles"
	if c.Command != nil && c.Command.HelpName != "" {
		help = c.Command.HelpName
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		msg = "unknown flag --" + strings.TrimLeft(name, "-")
	} else if m := badFlagValue().FindStringSubmatch(msg); m != nil {
		msg = badValue(c, m[2], "--"+m[2]+" "+m[1], m[3])
	} else if m := badEnvValue().FindStringSubmatch(msg); m != nil {
		msg = badValue(c, m[3], m[2]+"="+m[1]+" (--"+m[3]+")", "")
	}
	return usagef("%s; see `%s --help`", msg, help)
}

// The flag package's and urfave/cli's words for a value a flag cannot
// take, which say only "parse error": the value, the flag (or its
// environment variable) and the reason.
var (
	badFlagValue = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-([\w-]+): (.*)$`)
	})
	badEnvValue = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^could not parse ("(?:[^"\\]|\\.)*") (?:as .+ value )?from environment variable "([^"]+)" for flag ([\w-]+): `)
	})
)

// badValue says of a flag's value (what, as the user wrote it) what is
// wrong with it and what the flag takes, with an example.
func badValue(c *cli.Context, name, what, reason string) string {
	var flags []cli.Flag
	if c.Command != nil {
		flags = c.Command.Flags
	} else {
		flags = c.App.Flags
	}
	want, example := "a value of another kind", ""
	sep := " "
	for _, f := range flags {
		if !slices.Contains(f.Names(), name) {
			continue
		}
		switch baseFlag(f).(type) {
		case *cli.Uint64Flag, *cli.UintFlag:
			want, example = "a whole number of 0 or more", "42"
		case *cli.IntFlag, *cli.Int64Flag:
			want, example = "a whole number", "10"
		case *cli.DurationFlag:
			want, example = "a duration with its unit (ms, s, m, h)", "30s"
		case *cli.BoolFlag:
			// A boolean flag takes its value only after "=".
			want, example, sep = "true or false", "true", "="
		case *cli.Float64Flag:
			want, example = "a number", "0.5"
		}
	}
	msg := what + " is not " + want
	if reason == "value out of range" {
		msg = what + " is out of range for " + want
	}
	if example != "" {
		msg += ", e.g. --" + name + sep + example
	}
	return msg
}

// unknownCommand is the action of a command that only groups others (cmd,
// or the app itself when nil): without arguments it shows its help, with
// one it names what it did not find and the closest command it has.
func unknownCommand(cmd *cli.Command) cli.ActionFunc {
	return func(c *cli.Context) error {
		name := c.Args().First()
		if name == "" || (cmd == nil && name == "help") {
			if cmd == nil {
				return cli.ShowAppHelp(c)
			}
			return cli.ShowSubcommandHelp(c)
		}
		prefix, cmds, help := "", c.App.Commands, "sparkles --help"
		if cmd != nil {
			prefix, cmds, help = cmd.Name+" ", cmd.Subcommands, "sparkles "+cmd.Name+" --help"
		}
		if s := closest(name, cmds); s != "" {
			return usagef("unknown command %q; did you mean %q?", prefix+name, prefix+s)
		}
		return usagef("unknown command %q; see `%s`", prefix+name, help)
	}
}

// closest is the name among cmds a typo of name most likely meant: the one
// at the smallest edit distance, if that is small for the name's length,
// or the only one name is a prefix of.
func closest(name string, cmds []*cli.Command) string {
	best, bestDist := "", 0
	var prefixed []string
	for _, cmd := range cmds {
		if cmd.Hidden {
			continue
		}
		for _, n := range cmd.Names() {
			if strings.HasPrefix(n, name) {
				prefixed = append(prefixed, cmd.Name)
			}
			if d := editDistance(strings.ToLower(name), n); best == "" || d < bestDist {
				best, bestDist = cmd.Name, d
			}
		}
	}
	switch {
	case best != "" && bestDist <= max(1, len([]rune(name))/3):
		return best
	case len(prefixed) == 1:
		return prefixed[0]
	}
	return ""
}

// editDistance is the optimal string alignment distance of a and b: the
// insertions, deletions, substitutions and swaps of neighbours that turn
// one into the other, so "promt" is 1 from "prompt" and "porpmt" 2.
func editDistance(a, b string) int {
	x, y := []rune(a), []rune(b)
	d := make([][]int, len(x)+1)
	for i := range d {
		d[i] = make([]int, len(y)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(x); i++ {
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && x[i-1] == y[j-2] && x[i-2] == y[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(x)][len(y)]
}

// checkAddr refuses a listen address without a host:port shape, with the
// address that was probably meant: `--addr 7420` is a port.
func checkAddr(addr string) error {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return nil
	}
	if port, err := strconv.Atoi(addr); err == nil && port >= 0 && port <= 65535 {
		return usagef("--addr %q is a port; pass host:port, e.g. --addr 127.0.0.1:%d", addr, port)
	}
	return usagef("--addr %q is not host:port; pass one like --addr 127.0.0.1:7410", addr)
}

// parseServerURL checks a --url, and for a host:port or a bare port says
// which URL was probably meant.
func parseServerURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		return u, nil
	}
	if port, err := strconv.Atoi(raw); err == nil && port > 0 && port <= 65535 {
		return nil, usagef("--url %q is a port; pass the server's URL, e.g. --url http://127.0.0.1:%d", raw, port)
	}
	if _, _, err := net.SplitHostPort(raw); err == nil {
		return nil, usagef("--url %q is host:port; pass the server's URL, e.g. --url http://%s", raw, raw)
	}
	return nil, usagef("--url %q is not a server URL; pass one like %s", raw, defaultURL)
}

// exitStatus is the process exit status for what a command returned, and
// whether main still has to print it.
func exitStatus(err error) (code int, print bool) {
	var ec exitCode
	var ue usageError
	switch {
	case err == nil:
		return 0, false
	case errors.As(err, &ec):
		return int(ec), false
	case errors.As(err, &ue):
		return exitUsage, true
	}
	return 1, true
}
