package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary be the child server of the idle and stall
// scenarios, and the flooding agent of the peer scenario's child server, as
// `sparkles bench` is for the command; and a stand-in for the Mercure hub
// (peer_hub_test.go).
func TestMain(m *testing.M) {
	if os.Getenv(EnvFloodAgent) != "" {
		if err := RunFloodAgent(context.Background(), os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench flood agent:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if mode := os.Getenv(envTestHub); mode != "" {
		if err := runTestHub(mode, os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench test hub:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if dir := os.Getenv(EnvChild); dir != "" {
		if err := RunChild(context.Background(), dir, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestScenarios runs every scenario that runs by default at its short
// sizes: the figures are not held to anything here, only present, finite
// and complete. The opt-in peer scenario needs a build of Mercure; its own
// parts are tested in peer_test.go.
func TestScenarios(t *testing.T) {
	for _, name := range Names() {
		if optIn[name] {
			continue
		}
		t.Run(strings.ToUpper(name[:1])+name[1:], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rep, err := Run(ctx, Config{
				Scenarios:    []string{name},
				Short:        true,
				Dir:          t.TempDir(),
				ChildCommand: []string{os.Args[0]},
				Log:          t.Output(),
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Figures) == 0 {
				t.Fatalf("scenario %s reported no figures", name)
			}
			targets := 0
			for _, f := range rep.Figures {
				if got, want := f.Scenario, name; got != want {
					t.Fatalf("figure %q is of scenario %q, want %q", f.Name, got, want)
				}
				if f.Name == "" || f.Conditions == "" {
					t.Fatalf("figure without a name or conditions: %+v", f)
				}
				if math.IsNaN(f.Value) || math.IsInf(f.Value, 0) {
					t.Fatalf("figure %q = %v", f.Name, f.Value)
				}
				if (f.Target == "") != (f.Met == nil) {
					t.Fatalf("figure %q: target %q with met %v", f.Name, f.Target, f.Met)
				}
				if f.Target != "" {
					targets++
				}
			}
			if targets == 0 && !untargeted[name] {
				t.Fatalf("scenario %s holds no figure to a target", name)
			}
			if targets > 0 && untargeted[name] {
				t.Fatalf("scenario %s, which measures the machine, holds %d figures to a target", name, targets)
			}

			var table bytes.Buffer
			if err := rep.WriteTable(&table); err != nil {
				t.Fatal(err)
			}
			for _, f := range rep.Figures {
				if !strings.Contains(table.String(), f.Name) {
					t.Fatalf("table lacks %q:\n%s", f.Name, table.String())
				}
			}
			if !strings.Contains(table.String(), "share this machine's") {
				t.Fatalf("table does not say how client and server share the machine:\n%s", table.String())
			}
			var js bytes.Buffer
			if err := rep.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			var back Report
			if err := json.Unmarshal(js.Bytes(), &back); err != nil {
				t.Fatal(err)
			}
			if got, want := len(back.Figures), len(rep.Figures); got != want {
				t.Fatalf("JSON has %d figures, want %d", got, want)
			}
		})
	}
}

func TestRun(t *testing.T) {
	t.Run("ErrUnknownScenario", func(t *testing.T) {
		_, err := Run(context.Background(), Config{Scenarios: []string{"nope"}, Short: true})
		if err == nil || !strings.Contains(err.Error(), "append, latency") {
			t.Fatalf("err = %v, want one that lists the scenarios", err)
		}
	})
	t.Run("Profile", func(t *testing.T) {
		dir := t.TempDir()
		_, err := Run(context.Background(), Config{Scenarios: []string{"idle"}, Short: true, Dir: t.TempDir(),
			ChildCommand: []string{os.Args[0]}, ProfileDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"idle.cpu.pprof", "idle-server.cpu.pprof", "idle-server.heap.pprof", "idle-server.goroutine.pprof"} {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Size() == 0 {
				t.Fatalf("%s is empty", name)
			}
		}
	})
	t.Run("ErrNoChildCommand", func(t *testing.T) {
		_, err := Run(context.Background(), Config{Scenarios: []string{"idle"}, Short: true, Dir: t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), "child") {
			t.Fatalf("err = %v, want one about the child command", err)
		}
	})
}

func TestStampOf(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		ev := newEvent(eventSize)
		data, err := json.Marshal(ev.Data)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(data) > eventSize, true; got != want {
			t.Fatalf("event data of %d bytes, want more than the text size %d", len(data), eventSize)
		}
		if at, ok := stampOf(data); !ok || at <= 0 {
			t.Fatalf("stamp %d, %v in %s", at, ok, data)
		}
		at, ok := stampOf([]byte(`{"text":"bench:1234567 All work"}`))
		if got, want := at, int64(1234567); !ok || got != want {
			t.Fatalf("stamp = %d, %v; want %d", got, ok, want)
		}
	})
	t.Run("ErrNoStamp", func(t *testing.T) {
		if _, ok := stampOf([]byte(`{"text":"hello"}`)); ok {
			t.Fatal("found a stamp in an event without one")
		}
	})
}

func TestReadProcMem(t *testing.T) {
	m, err := readProcMem(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if m.RSS <= 0 || m.Anon <= 0 || m.Anon > m.RSS {
		t.Fatalf("VmRSS %d, RssAnon %d", m.RSS, m.Anon)
	}
}

func TestFormatValue(t *testing.T) {
	for _, c := range []struct {
		v    float64
		unit string
		want string
	}{
		{1234567.4, "events/s", "1,234,567 events/s"},
		{3.14159, "ms", "3.14 ms"},
		{12.34, "KiB", "12.3 KiB"},
		{42.31, "x", "42.3 x"},
		{0.5, "", "0.50"},
	} {
		if got := formatValue(c.v, c.unit); got != c.want {
			t.Fatalf("formatValue(%v, %q) = %q, want %q", c.v, c.unit, got, c.want)
		}
	}
}

func TestParseStat(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		got, err := parseStat([]byte("cpu  100 2 30 400 50 0 6 7 0 0\ncpu0 50 1 15 200 25 0 3 3 0 0\n"))
		if err != nil {
			t.Fatal(err)
		}
		// Busy: user, nice, system, irq, softirq, steal; not idle, iowait.
		if want := (cpuTicks{total: 595, busy: 145}); got != want {
			t.Fatalf("parseStat = %+v, want %+v", got, want)
		}
	})
	t.Run("ErrShortLine", func(t *testing.T) {
		if _, err := parseStat([]byte("cpu 1 2 3\n")); err == nil {
			t.Fatal("parseStat of a short line: no error")
		}
	})
	t.Run("ErrNotCPU", func(t *testing.T) {
		if _, err := parseStat([]byte("intr 1 2 3 4 5 6 7 8 9\n")); err == nil {
			t.Fatal("parseStat of a line that is not cpu: no error")
		}
	})
}

// TestWebhooks runs the webhooks scenario at its short sizes: every event
// of the paced load is delivered (webhookDelay fails otherwise), and each
// figure is there, deliveries counted and where each delay starts said.
func TestWebhooks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Scenarios: []string{"webhooks"}, Short: true, Dir: t.TempDir(),
		ChildCommand: []string{os.Args[0]}, Log: t.Output()})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Figure{}
	for _, f := range rep.Figures {
		byName[f.Name] = f
	}
	for _, name := range []string{
		"append to delivery at 100 events/s over 4 sandboxes p50",
		"append to delivery at 100 events/s over 4 sandboxes p99",
		"commit to delivery at 100 events/s over 4 sandboxes p50",
		"commit to delivery at 100 events/s over 4 sandboxes p99",
		"deliveries/s, 2 agents flooding",
		"deliveries/s, a backlog in 2 sandboxes draining",
	} {
		f, ok := byName[name]
		if !ok {
			t.Fatalf("no figure %q in %+v", name, rep.Figures)
		}
		if math.IsNaN(f.Value) || math.IsInf(f.Value, 0) || f.Value < 0 {
			t.Fatalf("figure %q = %v", name, f.Value)
		}
		if strings.HasPrefix(name, "deliveries/s") && f.Value == 0 {
			t.Fatalf("figure %q: nothing delivered (%s)", name, f.Conditions)
		}
		if strings.HasPrefix(name, "commit") && !strings.Contains(f.Conditions, "from the return of the event's append") ||
			strings.HasPrefix(name, "append") && !strings.Contains(f.Conditions, "from the call of the event's append") {
			t.Fatalf("figure %q does not say where its delay starts: %s", name, f.Conditions)
		}
	}
}
