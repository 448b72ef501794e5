package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
)

func newFilesCommand() *cli.Command {
	return &cli.Command{
		Name:      "files",
		Usage:     "list a directory of a sandbox's workspace, like ls -l",
		ArgsUsage: "[SANDBOX_ID[:DIR] | DIR]",
		Description: "Lists the workspace root, or DIR, of the sandbox named, else of --sandbox (SPARKLES_SANDBOX),\n" +
			"else of the newest sandbox that is not deleted. Each line is the type (d directory, - file,\n" +
			"l symbolic link, ? other), the size, the time of the last change and the path from the workspace\n" +
			"root, which is what `sparkles cp` takes.",
		Flags: clientFlags(sandboxFlag(), jsonFlag()),
		Action: func(c *cli.Context) error {
			args, err := positional(c, 0, 1)
			if err != nil {
				return err
			}
			var id, dir string
			if len(args) == 1 {
				if rid, rpath, ok := parseRemote(args[0]); ok {
					id, dir = rid, rpath
				} else if isSandboxID(args[0]) {
					id = args[0]
				} else {
					dir = args[0]
				}
			}
			api, err := newAPIClient(c)
			if err != nil {
				return err
			}
			if id, err = chooseSandbox(c, api, id); err != nil {
				return err
			}
			list := []client.FileEntry{}
			for e, err := range api.AllFiles(c.Context, id, dir) {
				if err != nil {
					return describeFiles(api, err, id, dir)
				}
				list = append(list, e)
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, list)
			}
			return printFiles(c.App.Writer, list)
		},
	}
}

// sandboxFlag names the sandbox of a command whose argument may leave it
// out, as prompt's --sandbox does.
func sandboxFlag() cli.Flag {
	return &cli.StringFlag{Name: "sandbox", EnvVars: []string{"SPARKLES_SANDBOX"}, Usage: "the sandbox, when no argument names one (default: the newest that is not deleted)"}
}

// remoteArg is a sandbox's path as cp and files take it: c_…:PATH.
var remoteArg = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^(c_[0-9A-Za-z]+):(.*)$`)
})

// parseRemote splits c_…:PATH; ok is false for a local path. A leading
// slash of PATH is the workspace root, as a container's is in docker cp.
func parseRemote(arg string) (id, p string, ok bool) {
	m := remoteArg().FindStringSubmatch(arg)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

func isSandboxID(s string) bool {
	return strings.HasPrefix(s, sandbox.PrefixSandbox) && remoteArg().MatchString(s+":")
}

// chooseSandbox is the sandbox a command acts on: the one its arguments
// named, else --sandbox (SPARKLES_SANDBOX), else the newest that is not
// deleted, said on stderr so nobody wonders which one it was.
func chooseSandbox(c *cli.Context, api *apiClient, named string) (string, error) {
	if named != "" {
		return named, nil
	}
	if id := c.String("sandbox"); id != "" {
		return id, nil
	}
	var newest string
	for sb, err := range api.Sandboxes(c.Context) {
		if err != nil {
			return "", api.describe(err)
		}
		if sb.Status != sandbox.StatusDeleted {
			newest = sb.ID // the API lists in creation order
		}
	}
	if newest == "" {
		return "", errors.New("there is no sandbox; create one with `sparkles sandbox create` or `sparkles prompt`")
	}
	fmt.Fprintf(c.App.ErrWriter, "sparkles: sandbox %s (the newest; name another with --sandbox or SPARKLES_SANDBOX)\n", newest)
	return newest, nil
}

// describeFiles describes an error of a workspace call for people.
func describeFiles(api *apiClient, err error, id, p string) error {
	var e *client.Error
	switch {
	case errors.Is(err, client.ErrNotDirectory):
		return fmt.Errorf("%s:%s is a file; `sparkles cp %s:%s -` prints it", id, p, id, p)
	case errors.Is(err, client.ErrIsDirectory):
		return fmt.Errorf("%s:%s is a directory; `sparkles files %s:%s` lists it", id, p, id, p)
	case errors.As(err, &e) && e.Type == sandbox.ENotFound && !strings.HasPrefix(e.Message, "sandbox "):
		return fmt.Errorf("%s; `sparkles files %s` lists the workspace", e.Message, id)
	}
	return api.describe(err)
}

// printFiles prints entries as ls -l does: sizes aligned to the right,
// the path last and as it is.
func printFiles(w io.Writer, list []client.FileEntry) error {
	sizes := make([]string, len(list))
	width := 1
	for i, e := range list {
		sizes[i] = "-"
		if e.Type != client.EntryDir {
			sizes[i] = strconv.FormatInt(e.Size, 10)
		}
		width = max(width, len(sizes[i]))
	}
	bw := bufio.NewWriter(w)
	for i, e := range list {
		fmt.Fprintf(bw, "%s %*s  %s  %s\n", typeLetter(e.Type), width, sizes[i], fileTime(e.ModifiedAt), sanitize(e.Path, true))
	}
	return bw.Flush()
}

func typeLetter(typ string) string {
	switch typ {
	case client.EntryDir:
		return "d"
	case client.EntryFile:
		return "-"
	case client.EntrySymlink:
		return "l"
	}
	return "?"
}

func fileTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04")
}

// gitSource is the source of sandbox create's --git URL[#REF] and
// --git-depth, nil without --git.
func gitSource(c *cli.Context) (*sandbox.Source, error) {
	raw, depth := c.String("git"), c.Int("git-depth")
	switch {
	case raw == "" && c.IsSet("git-depth"):
		return nil, usagef("--git-depth needs --git URL[#REF]")
	case raw == "":
		return nil, nil
	case depth < 0:
		return nil, usagef("--git-depth %d: want the number of commits to clone, or 0 for all", depth)
	}
	// A URL has no use for a fragment: the part after the last # is the ref.
	u, ref := raw, ""
	i := strings.LastIndex(raw, "#")
	if i >= 0 {
		u, ref = raw[:i], raw[i+1:]
	}
	if u == "" || (i >= 0 && ref == "") {
		return nil, usagef("--git %q: want URL or URL#REF", raw)
	}
	return &sandbox.Source{Git: &sandbox.GitSource{URL: u, Ref: ref, Depth: depth}}, nil
}
