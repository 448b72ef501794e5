package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/internal/app"
	"github.com/sparkles-dev/sparkles/internal/confine"
	"github.com/sparkles-dev/sparkles/internal/coordinator"
	"github.com/sparkles-dev/sparkles/internal/natscluster"
	"github.com/sparkles-dev/sparkles/internal/natsstore"
	"github.com/sparkles-dev/sparkles/internal/workspace"
	"github.com/sparkles-dev/sparkles/retention"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/urfave/cli/v2"
)

// serve's own defaults: the coordinator's zero disk limits are none.
const (
	defaultAddr           = "127.0.0.1:7410"
	defaultSandboxDiskMax = 10 << 30
	defaultDiskReserve    = 1 << 30
)

func newServeCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the coordinator: sandboxes, agents, and the event API",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "addr", Value: defaultAddr, EnvVars: []string{"SPARKLES_ADDR"}, Usage: "listen address"},
			&cli.StringFlag{Name: "data-dir", Value: defaultDataDir(), EnvVars: []string{"SPARKLES_DATA_DIR"}, Usage: "where the database, the token file and sandbox directories live"},
			&cli.StringFlag{Name: "store", EnvVars: []string{"SPARKLES_STORE"}, Usage: "event store: empty for the bbolt file in --data-dir, or nats://HOST:PORT for NATS JetStream shared by several coordinators"},
			&cli.BoolFlag{Name: "start-empty", EnvVars: []string{"SPARKLES_START_EMPTY"}, Usage: "start with a new database even though the data dir's is missing or empty beside sandbox directories (their sandboxes are forgotten)"},
			&cli.StringFlag{Name: "node-id", EnvVars: []string{"SPARKLES_NODE_ID"}, Usage: "this coordinator's name among those sharing a NATS store: letters, digits, - and _ (default: host name and process id)"},
			&cli.DurationFlag{Name: "lease-ttl", Value: natscluster.DefaultLeaseTTL, EnvVars: []string{"SPARKLES_LEASE_TTL"}, Usage: "with a NATS store: how long after a coordinator stops renewing its leases another one takes its sandboxes over"},
			&cli.StringFlag{Name: "advertise-url", EnvVars: []string{"SPARKLES_ADVERTISE_URL"}, Usage: "with a NATS store: the URL at which the other coordinators reach this one's API, to which they proxy the file, archive and diff requests of the sandboxes it runs (default: http:// and --addr with the port it listens on, or this machine's host name when --addr has no host or a wildcard one)"},
			&cli.IntFlag{Name: "nats-replicas", Value: natsstore.DefaultReplicas, EnvVars: []string{"SPARKLES_NATS_REPLICAS"}, Usage: "with a NATS store: replicas of the stream and buckets serve creates (3 on a JetStream cluster); existing ones keep theirs"},
			&cli.StringFlag{Name: "token", EnvVars: []string{"SPARKLES_TOKEN"}, Usage: "bearer token of the API (default: generated once, kept in <data-dir>/token)"},
			&cli.DurationFlag{Name: "keepalive", Value: app.DefaultKeepalive, EnvVars: []string{"SPARKLES_KEEPALIVE"}, Usage: "SSE ping interval while a stream is idle"},
			&cli.StringFlag{Name: "default-agent", Value: "demo", EnvVars: []string{"SPARKLES_DEFAULT_AGENT"}, Usage: "agent of sandboxes created without one"},
			&cli.DurationFlag{Name: "boot-timeout", Value: coordinator.DefaultBootTimeout, EnvVars: []string{"SPARKLES_BOOT_TIMEOUT"}, Usage: "how long an agent may take to start a session"},
			&cli.DurationFlag{Name: "turn-timeout", Value: coordinator.DefaultTurnTimeout, EnvVars: []string{"SPARKLES_TURN_TIMEOUT"}, Usage: "how long one turn may run"},
			&cli.DurationFlag{Name: "approval-timeout", Value: coordinator.DefaultApprovalTimeout, EnvVars: []string{"SPARKLES_APPROVAL_TIMEOUT"}, Usage: "how long an approval waits for a decision"},
			&cli.DurationFlag{Name: "flush-interval", Value: coordinator.DefaultFlushInterval, EnvVars: []string{"SPARKLES_FLUSH_INTERVAL"}, Usage: "at most one message.updated per part per interval"},
			&cli.DurationFlag{Name: "retention-max-age", Value: retention.DefaultMaxAge, EnvVars: []string{"SPARKLES_RETENTION_MAX_AGE"}, Usage: "prune events older than this"},
			&cli.IntFlag{Name: "retention-max-events", Value: retention.DefaultMaxEvents, EnvVars: []string{"SPARKLES_RETENTION_MAX_EVENTS"}, Usage: "keep at most this many events per sandbox"},
			&cli.StringFlag{Name: "retention-max-bytes", Value: formatSize(retention.DefaultMaxBytes), EnvVars: []string{"SPARKLES_RETENTION_MAX_BYTES"}, Usage: "bytes of events one sandbox's log may hold, e.g. 512M or 1G: past it its oldest finished turns are pruned, and a turn that alone outgrows it is stopped and fails with log_full"},
			&cli.DurationFlag{Name: "retention-interval", Value: retention.DefaultInterval, EnvVars: []string{"SPARKLES_RETENTION_INTERVAL"}, Usage: "time between retention passes"},
			&cli.IntFlag{Name: "retention-batch", Value: retention.DefaultBatch, EnvVars: []string{"SPARKLES_RETENTION_BATCH"}, Usage: "deletes per retention write transaction"},
			&cli.IntFlag{Name: "max-connections", Value: app.DefaultMaxConnections, EnvVars: []string{"SPARKLES_MAX_CONNECTIONS"}, Usage: "API connections open at once (lowered to fit the open-file limit): at the cap a new one takes the place of the one idle longest, else it is answered 503"},
			&cli.IntFlag{Name: "max-unauthenticated-connections", Value: app.DefaultMaxUnauthenticatedConnections, EnvVars: []string{"SPARKLES_MAX_UNAUTHENTICATED_CONNECTIONS"}, Usage: "of those, connections that have not shown a token yet (each may wait at most " + app.DefaultUnauthenticatedIdleTimeout.String() + " on its client); a flood of them cannot keep out a client with a token"},
			&cli.StringSliceFlag{Name: "cors-origin", EnvVars: []string{"SPARKLES_CORS_ORIGINS"}, Usage: "a browser origin (scheme://host[:port]) whose pages may call the API (repeatable; env var comma-separated); none by default"},
			&cli.StringFlag{Name: "isolation", Value: "on", EnvVars: []string{"SPARKLES_ISOLATION"}, Usage: "on: confine agent processes to their sandbox (user, PID and mount namespaces, Landlock, limits), and refuse to start where the kernel cannot; off: run them with the server user's rights"},
			&cli.StringFlag{Name: "agent-network", Value: confine.NetworkOpen, EnvVars: []string{"SPARKLES_AGENT_NETWORK"}, Usage: "open: agents reach the network (their model API) through pasta (apt-get install passt; without it, and unless this is set, agents get none), never the host's loopback; none: a network of their own with only loopback"},
			&cli.IntSliceFlag{Name: "agent-host-port", EnvVars: []string{"SPARKLES_AGENT_HOST_PORTS"}, Usage: "a TCP port of the host's loopback every confined agent may reach at the same port of its own (a model API or proxy on this machine), in either network; nothing else of the host's loopback is reachable (repeatable; env var comma-separated)"},
			&cli.StringSliceFlag{Name: "agent-read-path", EnvVars: []string{"SPARKLES_AGENT_READ_PATHS"}, Usage: "a file or directory every confined agent may read, beyond the system and its install (repeatable; env var comma-separated)"},
			&cli.StringSliceFlag{Name: "agent-write-path", EnvVars: []string{"SPARKLES_AGENT_WRITE_PATHS"}, Usage: "a file or directory every confined agent may read and write, beyond its sandbox (repeatable; env var comma-separated)"},
			&cli.IntFlag{Name: "agent-max-procs", Value: confine.DefaultMaxProcs, EnvVars: []string{"SPARKLES_AGENT_MAX_PROCS"}, Usage: "processes and threads of one confined agent (cgroup pids.max where the server may make a cgroup, and RLIMIT_NPROC on Linux 5.14+)"},
			&cli.StringFlag{Name: "agent-fs-budget", Value: formatSize(agent.DefaultFSBudget), EnvVars: []string{"SPARKLES_AGENT_FS_BUDGET"}, Usage: "memory the fs/read_text_file and fs/write_text_file requests of all agents may hold at once (at least " + formatSize(agent.MinFSBudget) + "); a request beyond it waits, e.g. " + formatSize(agent.DefaultFSBudget)},
			&cli.StringFlag{Name: "agent-memory-max", Value: formatSize(confine.DefaultMemoryMax), EnvVars: []string{"SPARKLES_AGENT_MEMORY_MAX"}, Usage: "memory of one confined agent, its /tmp and /dev/shm counted in, e.g. 512M or 4G: a cgroup (v2 delegated, or v1 as root) where the server may make one, else a guard that stops the agent over it"},
			&cli.StringFlag{Name: "sandbox-disk-max", Value: formatSize(defaultSandboxDiskMax), EnvVars: []string{"SPARKLES_SANDBOX_DISK_MAX"}, Usage: "bytes one sandbox's files (work, home, tmp, its snapshots) may take: past it the agent is stopped and its turn fails with disk_full, and uploads answer 507, e.g. 512M or 10G; 0 for no limit"},
			&cli.StringFlag{Name: "turn-image-max-size", Value: formatSize(sandbox.DefaultTurnImageMax), EnvVars: []string{"SPARKLES_TURN_IMAGE_MAX_SIZE"}, Usage: "decoded bytes of one image, or one file, of a turn's input, e.g. 10M"},
			&cli.StringFlag{Name: "files-max-size", Value: formatSize(workspace.DefaultFileMax), EnvVars: []string{"SPARKLES_FILES_MAX_SIZE"}, Usage: "bytes of one file written into a workspace through the API (PUT …/files, or one entry of an archive), e.g. 100M"},
			&cli.StringFlag{Name: "archive-max-size", Value: formatSize(workspace.DefaultArchiveMax), EnvVars: []string{"SPARKLES_ARCHIVE_MAX_SIZE"}, Usage: "unpacked bytes of one archive uploaded into a workspace (PUT …/archive), e.g. 2G"},
			&cli.IntFlag{Name: "archive-max-entries", Value: workspace.DefaultArchiveEntries, EnvVars: []string{"SPARKLES_ARCHIVE_MAX_ENTRIES"}, Usage: "entries of one archive uploaded into a workspace"},
			&cli.StringFlag{Name: "disk-reserve", Value: formatSize(defaultDiskReserve), EnvVars: []string{"SPARKLES_DISK_RESERVE"}, Usage: "free space under --data-dir kept for the event log: below it agents are stopped and turns refused, e.g. 512M or 1G; 0 for none"},
			&cli.StringFlag{Name: "log-format", Value: "text", EnvVars: []string{"SPARKLES_LOG_FORMAT"}, Usage: "text or json"},
			&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"SPARKLES_LOG_LEVEL"}, Usage: "debug, info, warn or error"},
			&cli.BoolFlag{Name: "webhook-allow-private", EnvVars: []string{"SPARKLES_WEBHOOK_ALLOW_PRIVATE"}, Usage: "let webhook endpoints be loopback, link-local or private addresses (local development, `sparkles webhooks listen`); without it they are refused at registration and at every connection"},
			&cli.BoolFlag{Name: "log-requests", EnvVars: []string{"SPARKLES_LOG_REQUESTS"}, Usage: "log every API request at info (without it they are logged at debug, and those answered 5xx at warn)"},
		}, agentFlags()...),
		Action: func(c *cli.Context) error {
			// So are the signal handlers installed (Run serves once they are).
			ctx, stop, installed := signalContextAsync(c.Context)
			defer stop()
			if err := checkAddr(c.String("addr")); err != nil {
				return err
			}
			logger, err := newLogger(c.String("log-format"), c.String("log-level"))
			if err != nil {
				return err
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("cannot find the sparkles binary to run the demo agent: %w", err)
			}
			agents, err := serveAgents(c, exe, logger)
			if err != nil {
				return err
			}
			idleTimeout, maxAgents, err := agentLimits(c)
			if err != nil {
				return err
			}
			if _, ok := agents[c.String("default-agent")]; !ok {
				return fmt.Errorf("--default-agent %q is not a registered agent", c.String("default-agent"))
			}
			fsBudget, err := parseSize(c.String("agent-fs-budget"))
			if err != nil || fsBudget < agent.MinFSBudget {
				return fmt.Errorf("--agent-fs-budget %q: want a size of at least %dM, such as 64M", c.String("agent-fs-budget"), agent.MinFSBudget>>20)
			}
			mem, err := parseSize(c.String("agent-memory-max"))
			if err != nil {
				return fmt.Errorf("--agent-memory-max %q: want a size such as 512M or 4G", c.String("agent-memory-max"))
			}
			diskMax, err := parseLimit(c, "sandbox-disk-max")
			if err != nil {
				return err
			}
			reserve, err := parseLimit(c, "disk-reserve")
			if err != nil {
				return err
			}
			limits, err := fileLimits(c)
			if err != nil {
				return err
			}
			imageMax, err := parseSize(c.String("turn-image-max-size"))
			if err != nil || imageMax <= 0 {
				return fmt.Errorf("--turn-image-max-size %q: want a size such as 5M", c.String("turn-image-max-size"))
			}
			logMax, err := parseSize(c.String("retention-max-bytes"))
			if err != nil {
				return fmt.Errorf("--retention-max-bytes %q: want a size such as 256M or 1G", c.String("retention-max-bytes"))
			}
			maxConns, maxUnauth := c.Int("max-connections"), c.Int("max-unauthenticated-connections")
			if maxConns < 1 || maxUnauth < 1 || maxUnauth > maxConns {
				return fmt.Errorf("--max-connections %d and --max-unauthenticated-connections %d: want at least 1 each, the second no more than the first", maxConns, maxUnauth)
			}
			m := &app.Main{
				Addr:                c.String("addr"),
				DataDir:             c.String("data-dir"),
				StoreURL:            c.String("store"),
				StartEmpty:          c.Bool("start-empty"),
				NodeID:              c.String("node-id"),
				LeaseTTL:            c.Duration("lease-ttl"),
				NATSReplicas:        c.Int("nats-replicas"),
				AdvertiseURL:        c.String("advertise-url"),
				Token:               c.String("token"),
				Keepalive:           c.Duration("keepalive"),
				LogRequests:         c.Bool("log-requests"),
				WebhookAllowPrivate: c.Bool("webhook-allow-private"),
				Agents:              agents,
				DefaultAgent:        c.String("default-agent"),
				BootTimeout:         c.Duration("boot-timeout"),
				TurnTimeout:         c.Duration("turn-timeout"),
				ApprovalTimeout:     c.Duration("approval-timeout"),
				FlushInterval:       c.Duration("flush-interval"),
				CORSOrigins:         c.StringSlice("cors-origin"),
				Retention: retention.Config{
					MaxAge:    c.Duration("retention-max-age"),
					MaxEvents: c.Int("retention-max-events"),
					MaxBytes:  logMax,
					Interval:  c.Duration("retention-interval"),
					Batch:     c.Int("retention-batch"),
				},
				Isolation: c.String("isolation"),
				Confine: confine.Options{
					Network:    agentNetwork(c),
					HostPorts:  c.IntSlice("agent-host-port"),
					ReadPaths:  c.StringSlice("agent-read-path"),
					WritePaths: c.StringSlice("agent-write-path"),
					MaxProcs:   c.Int("agent-max-procs"),
					MemoryMax:  mem,
				},
				Logger: logger,

				MaxConnections:                maxConns,
				MaxUnauthenticatedConnections: maxUnauth,

				AgentIdleTimeout: idleTimeout,
				AgentFSBudget:    fsBudget,
				MaxAgents:        maxAgents,
				SandboxDiskMax:   diskMax,
				DiskReserve:      reserve,
				FileLimits:       limits,
				TurnImageMax:     imageMax,
			}
			m.Signals = installed
			if err := m.Run(ctx); err != nil {
				m.Close()
				return err
			}
			greet(os.Stdout, m)
			if err := m.Wait(ctx); err != nil {
				logger.Error("stopping: the server no longer serves", "err", err)
				return errors.Join(err, m.Close())
			}
			logger.Info("shutting down")
			return m.Close()
		},
	}
}

func newLogger(format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

func defaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "sparkles")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "sparkles")
	}
	return "sparkles-data"
}

// parseLimit reads the size flag name, where 0 switches the limit off.
func parseLimit(c *cli.Context, name string) (int64, error) {
	if v := c.String(name); v != "0" {
		n, err := parseSize(v)
		if err != nil {
			return 0, fmt.Errorf("--%s %q: want a size such as 512M or 10G, or 0 for none", name, v)
		}
		return n, nil
	}
	return 0, nil
}

// fileLimits reads the limits of what the API writes into a workspace.
func fileLimits(c *cli.Context) (workspace.Limits, error) {
	var l workspace.Limits
	for _, f := range []struct {
		name string
		to   *int64
	}{{"files-max-size", &l.FileMax}, {"archive-max-size", &l.ArchiveMax}} {
		n, err := parseSize(c.String(f.name))
		if err != nil || n <= 0 {
			return l, fmt.Errorf("--%s %q: want a size such as 100M or 2G", f.name, c.String(f.name))
		}
		*f.to = n
	}
	if l.ArchiveEntries = c.Int("archive-max-entries"); l.ArchiveEntries < 1 {
		return l, fmt.Errorf("--archive-max-entries %d: want at least 1", l.ArchiveEntries)
	}
	return l, nil
}

// parseSize reads a byte count with an optional K, M or G (binary) suffix.
func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, errors.New("not a size")
	}
	return n * mult, nil
}

// formatSize writes n as parseSize reads it, in the largest unit that
// divides it: the defaults of the size flags, as --help shows them.
func formatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n >= u.mult && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// agentNetwork is --agent-network as the operator set it, or "" for the
// default: open where pasta is installed, else none with a warning.
func agentNetwork(c *cli.Context) string {
	if !c.IsSet("agent-network") {
		return ""
	}
	return c.String("agent-network")
}
