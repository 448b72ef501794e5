package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/sparkles-dev/sparkles/boltstore"
	"github.com/sparkles-dev/sparkles/internal/datadir"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/urfave/cli/v2"
)

func newDBCommand() *cli.Command {
	return &cli.Command{
		Name:  "db",
		Usage: "check, inspect and compact the database file while the server is stopped",
		Subcommands: []*cli.Command{
			{
				Name:  "compact",
				Usage: "rewrite the database file without its free pages, giving the space back to the disk",
				Description: "bbolt never shrinks its file: pages freed by retention are reused, not returned. " +
					"compact copies the data into a new file beside it, checks the copy against the original, " +
					"and swaps it in. It refuses while a server has the file open; on any failure the original is untouched.",
				Flags: []cli.Flag{dataDirFlag()},
				Action: func(c *cli.Context) error {
					path := dbPath(c.String("data-dir"))
					ctx, stop := signalContext(c.Context)
					defer stop()
					before, after, err := boltstore.CompactFile(ctx, path, boltstore.CompactOptions{
						Removed: func(p string, size int64) {
							fmt.Fprintf(c.App.Writer, "removed %s (%s), the copy of an interrupted compaction\n", p, formatBytes(size))
						},
					})
					if err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "compacted %s: %s -> %s (%s given back)\n",
						path, formatBytes(before), formatBytes(after), formatBytes(max(before-after, 0)))
					return nil
				},
			},
			{
				Name:  "check",
				Usage: "check the database file: every page, bbolt's consistency check and the store's own layout",
				Description: "check reads the whole file read-only, as a server's start does and more: the structure of " +
					"every page, bbolt's consistency check, and that each sandbox's log, state and write-ahead log agree. " +
					"Run it on a copy before restoring it. It refuses while a server has the file open. It exits 1 if it finds a problem.",
				Flags: []cli.Flag{dataDirFlag()},
				Action: func(c *cli.Context) error {
					path := dbPath(c.String("data-dir"))
					if err := boltstore.CheckFile(c.Context, path, boltstore.CompactOptions{}); err != nil {
						var damaged *boltstore.DamagedError
						if errors.As(err, &damaged) {
							return fmt.Errorf("%w; restore it from a copy that passes db check", err)
						}
						return err
					}
					fmt.Fprintf(c.App.Writer, "%s: no problem found\n", path)
					return nil
				},
			},
			{
				Name:  "stats",
				Usage: "show the database file's size, free pages and every sandbox's log",
				Flags: []cli.Flag{
					dataDirFlag(),
					&cli.BoolFlag{Name: "json", EnvVars: []string{"SPARKLES_JSON"}, Usage: "print JSON instead of a table"},
				},
				Action: func(c *cli.Context) error {
					path := dbPath(c.String("data-dir"))
					st, err := boltstore.ReadStats(c.Context, path, boltstore.CompactOptions{})
					if err != nil {
						return err
					}
					info, err := os.Stat(path)
					if err != nil {
						return err
					}
					out := newDBStats(path, info.Size(), st)
					if c.Bool("json") {
						enc := json.NewEncoder(c.App.Writer)
						enc.SetIndent("", "  ")
						return enc.Encode(out)
					}
					return out.print(c.App.Writer)
				},
			},
		},
	}
}

func dataDirFlag() cli.Flag {
	return &cli.StringFlag{Name: "data-dir", Value: defaultDataDir(), EnvVars: []string{"SPARKLES_DATA_DIR"}, Usage: "the data dir of the server whose database to use"}
}

// dbPath is where serve keeps the database in a data dir.
func dbPath(dataDir string) string { return datadir.Dir(dataDir).Store() }

// dbStats is the output of db stats; ids are decimal strings as in the API.
type dbStats struct {
	Path      string           `json:"path"`
	FileSize  int64            `json:"file_size"`
	InUse     int64            `json:"size_in_use"`
	FreePages int              `json:"free_pages"`
	FreeBytes int64            `json:"free_bytes"`
	Sandboxes []dbSandboxStats `json:"sandboxes"`
}

type dbSandboxStats struct {
	ID            string      `json:"id"`
	Status        string      `json:"status"`
	Events        int         `json:"events"`
	OldestEventID sandbox.Seq `json:"oldest_event_id"`
	LastEventID   sandbox.Seq `json:"last_event_id"`
	PrunedThrough sandbox.Seq `json:"pruned_through"`
}

func newDBStats(path string, size int64, st boltstore.Stats) dbStats {
	out := dbStats{
		Path: path, FileSize: size, InUse: st.FileSize, FreePages: st.FreePages,
		// bbolt's default page size is the OS page size, which serve uses.
		FreeBytes: int64(st.FreePages) * int64(os.Getpagesize()),
		Sandboxes: make([]dbSandboxStats, 0, len(st.Sandboxes)),
	}
	for _, s := range st.Sandboxes {
		out.Sandboxes = append(out.Sandboxes, dbSandboxStats{
			ID: s.ID, Status: s.Status, Events: s.Events,
			OldestEventID: sandbox.Seq(s.OldestEventID), LastEventID: sandbox.Seq(s.LastEventID), PrunedThrough: sandbox.Seq(s.PrunedThrough),
		})
	}
	return out
}

func (s dbStats) print(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "file\t%s\n", s.Path)
	fmt.Fprintf(tw, "size\t%s on disk, %s in use\n", formatBytes(s.FileSize), formatBytes(s.InUse))
	fmt.Fprintf(tw, "free\t%d pages (%s), reused by new writes; db compact gives them back\n", s.FreePages, formatBytes(s.FreeBytes))
	fmt.Fprintf(tw, "sandboxes\t%d\n\n", len(s.Sandboxes))
	if len(s.Sandboxes) > 0 {
		fmt.Fprintln(tw, "ID\tSTATUS\tEVENTS\tOLDEST\tLAST\tPRUNED THROUGH")
		for _, sb := range s.Sandboxes {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\n", sb.ID, sb.Status, sb.Events, sb.OldestEventID, sb.LastEventID, sb.PrunedThrough)
		}
	}
	return tw.Flush()
}

func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
