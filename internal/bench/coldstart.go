package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sparkles-dev/sparkles/internal/datadir"
)

// runColdStart measures how long a server takes to start on a large data
// dir, from the start of its process to the first answer of /healthz, what
// it holds in memory then, and what it holds and has used 5 s after its
// start, when the first retention pass has run. Two data dirs are built,
// each by a child server that then shuts down cleanly: 2,000 sandboxes of
// 1,000 events each (about 1.3 GB of file), and one sandbox whose one turn
// made 100,000 tool calls. The server timed is `sparkles serve` when the
// bench runs from the sparkles binary (ServeCommand), the child server
// otherwise. Each start is measured with the page cache dropped (which
// needs root: without it the cold start is skipped, and said so), then
// warm; and, on the first dir, once more cold after a server was killed
// (kill -9) right after a write, so that the file was not closed.
func runColdStart(ctx context.Context, r *runner) error {
	restore, err := r.coldBinary()
	if err != nil {
		return err
	}
	defer restore()
	sandboxes, events := pick(r, 2000, 20), pick(r, 1000, 50)
	if err := coldStartDir(ctx, r, childRequest{Op: "create", N: sandboxes, Fill: events, Size: coldEventSize},
		fmt.Sprintf("%d sandboxes x %d events of %d-byte text", sandboxes, events, coldEventSize), sandboxes, "", true); err != nil {
		return err
	}
	tools := pick(r, 100000, 2000)
	return coldStartDir(ctx, r, childRequest{Op: "tools", Fill: tools, Size: 40},
		fmt.Sprintf("one sandbox of %d tool calls in one turn", tools), 1, " (one long turn)", false)
}

// coldStartDir builds a data dir with req and measures starts on it; what
// names it in the figures' conditions, suffix in their names.
func coldStartDir(ctx context.Context, r *runner, req childRequest, what string, sandboxes int, suffix string, crash bool) error {
	dir, cleanup, err := r.tempDir()
	if err != nil {
		return err
	}
	defer cleanup()
	r.logf("building a data dir of %s", what)
	c, err := startChild(ctx, r.cfg.ChildCommand, dir)
	if err != nil {
		return err
	}
	_, err = c.do(ctx, req)
	var written procMem
	var writtenGo childReply
	if err == nil {
		// What the server that wrote every event still holds: of the
		// records, only what its WAL has not moved into the file, so not
		// the log.
		written, writtenGo, err = settledMem(ctx, c)
	}
	c.close()
	if err != nil {
		return err
	}
	// The sandboxes the child left ready are settled (stopped) by the
	// first start of serve, an append each; a data dir a server left
	// holds them settled already. It runs a first retention pass too,
	// which records where each log's compaction stands.
	s, err := r.timedStart(ctx, dir)
	if err != nil {
		return err
	}
	if err := s.settle(ctx); err != nil {
		s.stop()
		return err
	}
	s.stop()
	fi, err := os.Stat(datadir.Dir(dir).Store())
	if err != nil {
		return err
	}
	what = fmt.Sprintf("%s, a %.0f MiB file", what, mib(fi.Size()))
	server := "the bench's child server"
	if len(r.cfg.ServeCommand) > 0 {
		server = "sparkles serve"
	}
	r.add(Figure{Name: "RSS of the server that wrote it" + suffix, Value: mib(written.RSS), Unit: "MiB",
		Conditions: fmt.Sprintf("the bench's child server that built the data dir (%s), after it wrote every event and a GC that returns freed memory: %.1f MiB anonymous, Go heap %.1f MiB; %.1f KiB of heap per sandbox",
			what, mib(written.Anon), mib(int64(writtenGo.HeapInuse)), float64(writtenGo.HeapInuse)/1024/float64(sandboxes))})
	dropped := canDropCaches()
	if !dropped {
		r.logf("not root: the page cache cannot be dropped (echo 3 > /proc/sys/vm/drop_caches), so the cold starts are skipped")
	}
	measure := func(name, cond string, cold bool, target time.Duration) error {
		if cold && !dropped {
			return nil
		}
		if cold {
			if err := dropCaches(); err != nil {
				return err
			}
		}
		s, err := r.timedStart(ctx, dir)
		if err != nil {
			return err
		}
		defer s.stop()
		name += suffix
		f := Figure{Name: name, Value: ms(s.took), Unit: "ms",
			Conditions: fmt.Sprintf("%s, from the start of the process to the first /healthz answer%s; %s; %s", server, readyNote(s), what, cond)}
		if target > 0 {
			f.Target, f.Met = fmt.Sprintf("<= %s", target), atLeast(ms(target), ms(s.took))
		}
		r.add(f)
		r.add(Figure{Name: "RSS after a " + name, Value: mib(s.mem.RSS), Unit: "MiB",
			Conditions: fmt.Sprintf("VmRSS at the first /healthz answer: %.1f MiB anonymous, %.1f MiB of mapped files (RssFile), %.1f MiB of them the store file's mapping (smaps)",
				mib(s.mem.Anon), mib(s.mem.File), mib(s.dbRSS))})
		// Five seconds after the start the first retention pass has run:
		// what the server holds then is what start-up and that pass cost.
		if err := sleepCtx(ctx, time.Until(s.start.Add(afterStart))); err != nil {
			return err
		}
		mem, err := readProcMem(s.pid)
		if err != nil {
			return err
		}
		cpu, err := procCPU(s.pid)
		if err != nil {
			return err
		}
		r.add(Figure{Name: "RSS 5 s after a " + name, Value: mib(mem.RSS), Unit: "MiB",
			Conditions: fmt.Sprintf("VmRSS 5 s after the start of the process, its first retention pass run: %.1f MiB anonymous, %.1f MiB RssFile (%.1f KiB per sandbox), %.0f ms of CPU used in those 5 s",
				mib(mem.Anon), mib(mem.File), float64(mem.File)/1024/float64(sandboxes), ms(cpu))})
		r.add(Figure{Name: "CPU in the first 5 s after a " + name, Value: ms(cpu), Unit: "ms",
			Conditions: "user and system CPU of the server from its start to 5 s after it (/proc/PID/stat): start-up, recovery and the first retention pass; " + what})
		return nil
	}
	if err := measure("cold start", "page cache dropped first", true, 300*time.Millisecond); err != nil {
		return err
	}
	if err := measure("warm start", "the file in the page cache", false, 0); err != nil {
		return err
	}
	if !crash {
		return nil
	}
	// A write, then a kill: the file is left as a crash leaves it.
	c, err = startChild(ctx, r.cfg.ChildCommand, dir)
	if err != nil {
		return err
	}
	_, err = c.do(ctx, childRequest{Op: "create", N: 1})
	_ = c.cmd.Process.Kill()
	c.close()
	if err != nil {
		return err
	}
	return measure("cold start after a crash", "the server before it was killed (kill -9) after a write; page cache dropped first", true, 0)
}

// afterStart is when, after its start, a server's memory and CPU are read
// a second time: its first retention pass begins at once.
const afterStart = 5 * time.Second

// procCPU is the CPU time process pid has used, user and system, from
// /proc/PID/stat (in USER_HZ ticks, 100 a second on Linux).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from the last ')'.
	f := bytes.Fields(b[bytes.LastIndexByte(b, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var ticks int64
	for _, v := range f[11:13] { // utime, stime
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// coldEventSize is the text of each event of the cold-start data dir: with
// its envelope and its page's share, about 690 bytes of file, 1.3 GB for
// 2,000,000 events.
const coldEventSize = eventSize

func canDropCaches() bool {
	f, err := os.OpenFile("/proc/sys/vm/drop_caches", os.O_WRONLY, 0)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// dropCaches writes the dirty pages out and drops the page cache, so that
// the next start reads the file from the disk.
func dropCaches() error {
	syscall.Sync()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
}

// started is a server whose start was timed.
type started struct {
	start time.Time
	pid   int
	// passed is closed when the server logs its first retention pass; nil
	// for the child server, which runs none.
	passed <-chan struct{}
	took   time.Duration
	// ready is when sparkles serve logged that it serves, the confinement
	// probe passed: agents start from then on (0 for the child server).
	ready time.Duration
	mem   procMem
	dbRSS int64 // of mem.File, the store file's mapping
	stop  func()
}

// storeFile is the name of the bbolt file in a data dir, as a process's
// maps show it.
var storeFile = filepath.Base(datadir.Dir("").Store())

// mappedRSS sums the resident bytes of the mappings of pid whose file is
// named name, from /proc/PID/smaps.
func mappedRSS(pid int, name string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return 0, err
	}
	var total int64
	in := false
	for line := range bytes.Lines(b) {
		f := bytes.Fields(line)
		switch {
		case len(f) >= 5 && bytes.Contains(f[0], []byte("-")) && !bytes.HasSuffix(f[0], []byte(":")):
			in = len(f) >= 6 && filepath.Base(string(f[len(f)-1])) == name
		case in && len(f) >= 2 && string(f[0]) == "Rss:":
			kb, err := strconv.ParseInt(string(f[1]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/smaps: %q: %w", pid, line, err)
			}
			total += kb << 10
		}
	}
	return total, nil
}

var servingLine = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`msg="sparkles is serving"`)
})

// freePort returns a port of 127.0.0.1 that nothing listens on now.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	_, port, err := net.SplitHostPort(l.Addr().String())
	return port, err
}

// timedStart starts a server on dir and times it to its first /healthz
// answer: `sparkles serve` when ServeCommand is set, else the child server.
func (r *runner) timedStart(ctx context.Context, dir string) (*started, error) {
	if len(r.cfg.ServeCommand) == 0 {
		start := time.Now()
		c, err := startChild(ctx, r.cfg.ChildCommand, dir)
		if err != nil {
			return nil, err
		}
		if err := healthz(ctx, c.addr); err != nil {
			c.close()
			return nil, err
		}
		s := &started{start: start, pid: c.cmd.Process.Pid, took: time.Since(start), stop: c.close}
		s.mem, err = c.mem()
		if err == nil {
			s.dbRSS, err = mappedRSS(c.cmd.Process.Pid, storeFile)
		}
		if err != nil {
			c.close()
			return nil, err
		}
		return s, nil
	}
	// The port is chosen here, so /healthz is asked from the start: the
	// server answers it before its log says it serves, which it says once
	// the confinement probe passed (ready).
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	argv := append(append([]string{}, r.cfg.ServeCommand...), "--data-dir", dir, "--addr", "127.0.0.1:"+port, "--log-format", "text")
	cmd := exec.Command(argv[0], argv[1:]...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	stop := func() { stopChild(cmd.Process, syscall.SIGTERM, exited) }
	served := make(chan time.Time, 1)
	passed := make(chan struct{})
	tail := &tailBuffer{}
	go func() {
		defer close(exited)
		seen := false // the first retention pass
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			tail.Write(append(sc.Bytes(), '\n'))
			if !seen && bytes.Contains(sc.Bytes(), firstPassLine) {
				close(passed)
				seen = true
			}
			if servingLine().Match(sc.Bytes()) {
				select {
				case served <- time.Now():
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = cmd.Wait()
	}()
	if err := untilHealthy(ctx, "127.0.0.1:"+port, exited); err != nil {
		if errors.Is(err, errExited) {
			return nil, fmt.Errorf("sparkles serve exited before serving: %s", tail)
		}
		stop()
		return nil, err
	}
	took := time.Since(start)
	var ready time.Duration
	select {
	case at := <-served:
		ready = at.Sub(start)
	case <-exited:
		return nil, fmt.Errorf("sparkles serve exited before serving: %s", tail)
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	}
	s := &started{start: start, pid: cmd.Process.Pid, took: took, ready: ready, stop: stop, passed: passed}
	s.mem, err = readProcMem(cmd.Process.Pid)
	if err == nil {
		s.dbRSS, err = mappedRSS(cmd.Process.Pid, storeFile)
	}
	if err != nil {
		stop()
		return nil, err
	}
	return s, nil
}

// stopChild signals p with sig and waits until exited is closed; a
// process that has not exited within 30 s is killed.
func stopChild(p *os.Process, sig os.Signal, exited <-chan struct{}) {
	_ = p.Signal(sig)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = p.Kill()
		<-exited
	}
}

var firstPassLine = []byte(`msg="first retention pass"`)

// readyNote says when the server was ready to start agents, when that is
// known and came after /healthz.
func readyNote(s *started) string {
	if s.ready <= s.took {
		return ""
	}
	return fmt.Sprintf(" (ready to start agents, the confinement probe passed, at %.1f ms)", ms(s.ready))
}

// settle waits for the server's first retention pass, which on a data dir
// no server ran on before reads every log once.
func (s *started) settle(ctx context.Context) error {
	if s.passed == nil {
		return nil
	}
	select {
	case <-s.passed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(10 * time.Minute):
		return errors.New("no first retention pass within 10 minutes")
	}
}

// errExited is untilHealthy's error for a server that exited first.
var errExited = errors.New("exited before serving")

// untilHealthy asks addr for /healthz every millisecond until it answers
// 200, or the server exits (exited closes: errExited), or ctx ends.
func untilHealthy(ctx context.Context, addr string, exited <-chan struct{}) error {
	for healthz(ctx, addr) != nil {
		select {
		case <-exited:
			return errExited
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// healthz asks a server at addr for /healthz once.
func healthz(ctx context.Context, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New("/healthz answered " + resp.Status)
	}
	return nil
}

// coldBinary makes the timed starts of `sparkles serve` read their binary
// from the disk when the page cache is dropped, as Mercure's do: the
// bench's own process maps the sparkles binary it runs from, and the
// kernel keeps mapped pages when the cache is dropped, so a start of that
// file found most of its code in memory. The starts run a copy that no
// process maps instead, made in the bench's directory. The returned func
// puts ServeCommand back and removes the copy; without ServeCommand, or
// where the cache cannot be dropped, there is nothing to do.
func (r *runner) coldBinary() (restore func(), err error) {
	if len(r.cfg.ServeCommand) == 0 || !canDropCaches() {
		return func() {}, nil
	}
	dir, cleanup, err := r.tempDir()
	if err != nil {
		return nil, err
	}
	src, err := os.Open(r.cfg.ServeCommand[0])
	if err != nil {
		cleanup()
		return nil, err
	}
	defer src.Close()
	copyPath := filepath.Join(dir, "sparkles")
	dst, err := os.OpenFile(copyPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		cleanup()
		return nil, err
	}
	_, err = io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cleanup()
		return nil, err
	}
	// A directory on a noexec mount holds the copy but cannot run it.
	if out, err := exec.CommandContext(context.Background(), copyPath, "version").CombinedOutput(); err != nil {
		cleanup()
		if out = bytes.TrimSpace(out); len(out) > 0 {
			err = fmt.Errorf("%w: %s", err, out)
		}
		return nil, fmt.Errorf("the cold starts run a copy of the sparkles binary in %s, which cannot run there (%v); pass a --dir on a filesystem that allows running programs", dir, err)
	}
	saved := r.cfg.ServeCommand
	r.cfg.ServeCommand = append([]string{copyPath}, saved[1:]...)
	return func() {
		r.cfg.ServeCommand = saved
		cleanup()
	}, nil
}
