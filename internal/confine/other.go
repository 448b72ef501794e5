//go:build !linux

package confine

import (
	"github.com/sparkles-dev/sparkles/internal/agent"

	"errors"
	"log/slog"
	"os"
	"os/exec"
)

// Defaults of Options.
const (
	DefaultMaxProcs  = 1024
	DefaultMemoryMax = 4 << 30
)

// Options say what agents may do beyond their sandbox; see the Linux build.
type Options struct {
	Network               string
	HostPorts             []int
	ReadPaths, WritePaths []string
	MaxProcs              int
	MemoryMax             int64
	DataDir               string
	Logger                *slog.Logger
}

// Launcher confines agents on Linux only.
type Launcher struct{}

// New fails: confinement is built on Linux namespaces and Landlock.
func New(Options) (*Launcher, error) {
	return nil, errors.New("agent confinement needs Linux (namespaces and Landlock)")
}

// Prepare fails as New does.
func Prepare(opts Options) (*Launcher, error) { return New(opts) }

func (*Launcher) Probe() error                  { return errors.New("agent confinement needs Linux") }
func (*Launcher) Isolation() string             { return "off" }
func (*Launcher) Check(agent.Confinement) error { return errors.New("agent confinement needs Linux") }
func (*Launcher) LogAttrs() []any               { return nil }
func (*Launcher) Start(*exec.Cmd, string, agent.Confinement) (func(), error) {
	return nil, errors.New("agent confinement needs Linux")
}

// Main is never reached off Linux: nothing starts the launcher.
func Main() { os.Exit(125) }

// Yielding runs fn.
func Yielding(fn func() error) error { return fn() }
