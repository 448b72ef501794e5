package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v2"
)

func newVersionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version and VCS commit of this binary",
		Action: func(c *cli.Context) error {
			if _, err := positional(c, 0, 0); err != nil {
				return err
			}
			fmt.Fprintln(c.App.Writer, versionLine())
			return nil
		},
	}
}

// versionLine says which build this binary is: the module version and
// commit the go command stamped into it, as `go version -m` reads them.
func versionLine() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return buildLine(nil)
	}
	return buildLine(info)
}

// buildLine formats a build's version. A binary built from a checkout has
// no module version ("(devel)"), and one built with -buildvcs=false, or
// outside a repository, has no commit.
func buildLine(info *debug.BuildInfo) string {
	version, commit, modified, when := "(devel)", "", false, ""
	if info != nil {
		if v := info.Main.Version; v != "" {
			version = v
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			case "vcs.time":
				when = s.Value
			}
		}
	}
	line := "sparkles " + version
	switch {
	case commit == "":
		line += ", commit unknown"
	default:
		line += ", commit " + commit
		if modified {
			line += " (modified)"
		}
		if when != "" {
			line += " of " + when
		}
	}
	return line + ", " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}
