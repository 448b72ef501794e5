package bench

import (
	"io"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
)

func TestSummarizeTurnCost(t *testing.T) {
	w := func(cpu time.Duration) turnWindow { return turnWindow{cpu: cpu} }
	s := summarizeTurnCost([]turnCost{
		{early: w(100), late: w(120)}, // 1.2
		{early: w(50), late: w(100)},  // 2, the one noisy run
		{early: w(80), late: w(80)},   // 1
	})
	if s.early.cpu != 80 || s.late.cpu != 100 {
		t.Fatalf("medians %v and %v, want 80 and 100", s.early.cpu, s.late.cpu)
	}
	// The ratio is the median of each run's, not the ratio of the
	// medians (1.25), which mixes runs.
	if s.ratio != 1.2 || len(s.ratios) != 3 {
		t.Fatalf("ratio %v of %v, want 1.2", s.ratio, s.ratios)
	}
	if got := formatRatios(s.ratios); got != "1.20x, 2.00x, 1.00x" {
		t.Fatalf("formatRatios = %q", got)
	}
	if z := summarizeTurnCost([]turnCost{{early: w(0), late: w(10)}}); z.ratio != 0 || len(z.ratios) != 0 {
		t.Fatalf("a window of no CPU has no ratio: %+v", z)
	}
}

func TestOrdinal(t *testing.T) {
	for n, want := range map[int64]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 100: "100th", 100000: "100,000th", 5101: "5,101st", 112: "112th"} {
		if got := ordinal(n); got != want {
			t.Errorf("ordinal(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestProcessCPU reads another process's CPU clock while that process
// spins: the flooding agent, flooding into nothing.
func TestProcessCPU(t *testing.T) {
	if _, err := processCPU(os.Getpid()); err != nil {
		t.Skipf("no process CPU clocks here: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), EnvFloodAgent+"=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	c0, err := processCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	prompt := `{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"prompt":[{"type":"text","text":"` + floodNew + `"}]}}` + "\n"
	if _, err := io.WriteString(in, prompt); err != nil {
		t.Fatal(err)
	}
	// Finer than /proc/PID/stat's 10 ms ticks, and growing as it spins.
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := processCPU(pid)
		if err != nil {
			t.Fatal(err)
		}
		if c < c0 {
			t.Fatalf("the clock went back from %v to %v", c0, c)
		}
		if c-c0 >= 50*time.Millisecond {
			if c%(10*time.Millisecond) == 0 && c0%(10*time.Millisecond) == 0 {
				t.Fatalf("readings %v and %v are whole ticks", c0, c)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the spinning child used %v of CPU in a minute", c-c0)
		}
		runtime.Gosched()
	}
}
