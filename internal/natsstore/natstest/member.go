package natstest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// A cluster's server runs in a process of its own: this test binary,
// started again with memberEnv set to the server's spec. natstest's init
// sees it, runs the server and exits, before any test runs. The parent
// talks to it over its standard input and output, a line each way:
//
//	(at start)       → "url CLIENT_URL", once it takes connections
//	"state"          → "current=BOOL leader=BOOL peers=N"
//	"leads STREAM"   → "true" or "false"
//	(end of input)   → it shuts down and exits
const memberEnv = "SPARKLES_NATSTEST_MEMBER"

// memberSpec is one server of a cluster.
type memberSpec struct {
	Name        string   // server name, s1…
	ClusterPort int      // its route port
	Routes      []string // every server's route URL
	StoreDir    string
}

func init() {
	if spec := os.Getenv(memberEnv); spec != "" {
		os.Exit(runMember(spec, os.Stdin, os.Stdout))
	}
}

// runMember runs the server spec describes until in ends, answering the
// parent's questions on out.
func runMember(spec string, in io.Reader, out io.Writer) int {
	var ms memberSpec
	if err := json.Unmarshal([]byte(spec), &ms); err != nil {
		fmt.Fprintln(out, "error", err)
		return 2
	}
	var routes []*url.URL
	for _, r := range ms.Routes {
		u, err := url.Parse(r)
		if err != nil {
			fmt.Fprintln(out, "error", err)
			return 2
		}
		routes = append(routes, u)
	}
	s, err := server.NewServer(&server.Options{
		ServerName: ms.Name,
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   ms.StoreDir,
		// An acknowledged publish is on disk, as the store's contract
		// requires.
		SyncAlways: true,
		NoLog:      true,
		NoSigs:     true,
		Cluster: server.ClusterOpts{
			Name: "sparkles-test",
			Host: "127.0.0.1",
			Port: ms.ClusterPort,
		},
		Routes:             routes,
		JetStreamMaxMemory: 64 << 20,
		JetStreamMaxStore:  1 << 30,
	})
	if err != nil {
		fmt.Fprintln(out, "error", err)
		return 2
	}
	go s.Start()
	defer func() {
		s.Shutdown()
		s.WaitForShutdown()
	}()
	// A server listens within a second here; 20 s covers a machine that
	// runs every other test beside it.
	if !s.ReadyForConnections(20 * time.Second) {
		fmt.Fprintln(out, "error not ready for connections within 20s (a port taken meanwhile?)")
		return 1
	}
	fmt.Fprintln(out, "url", s.ClientURL())
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		q := sc.Text()
		switch {
		case q == "state":
			fmt.Fprintf(out, "current=%t leader=%t peers=%d\n", s.JetStreamIsCurrent(), s.JetStreamIsLeader(), len(s.JetStreamClusterPeers()))
		case strings.HasPrefix(q, "leads "):
			fmt.Fprintln(out, s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, strings.TrimPrefix(q, "leads ")))
		default:
			fmt.Fprintln(out, "error unknown question", q)
		}
	}
	return 0
}

// member is the parent's end of one server's process.
type member struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *bytes.Buffer
	url    string
	mu     sync.Mutex // one question at a time
}

// startMember starts the server spec describes and waits until it takes
// connections.
func startMember(spec memberSpec) (*member, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), memberEnv+"="+string(b))
	m := &member{cmd: cmd, stderr: &bytes.Buffer{}}
	// The server's own race reports, if any, end here: they are
	// nats-server's, not the code under test's (see Cluster), and the
	// test's log shows them once the server stopped.
	cmd.Stderr = m.stderr
	if m.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	m.out = bufio.NewReader(stdout)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := m.out.ReadString('\n')
	if u, ok := strings.CutPrefix(strings.TrimSpace(line), "url "); err == nil && ok {
		m.url = u
		return m, nil
	}
	out := m.stop()
	if err == nil {
		err = errors.New(strings.TrimSpace(line))
	}
	return nil, fmt.Errorf("%s: %v%s", spec.Name, err, strings.TrimRight("\n"+out, "\n"))
}

// ask sends the server one question and returns its answer.
func (m *member) ask(q string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := io.WriteString(m.in, q+"\n"); err != nil {
		return "", err
	}
	line, err := m.out.ReadString('\n')
	return strings.TrimSpace(line), err
}

// memberState is what the server says of its JetStream cluster.
type memberState struct {
	Current, Leader bool
	Peers           int
}

func (m *member) state() (memberState, error) {
	var st memberState
	a, err := m.ask("state")
	if err != nil {
		return st, err
	}
	_, err = fmt.Sscanf(a, "current=%t leader=%t peers=%d", &st.Current, &st.Leader, &st.Peers)
	return st, err
}

// leads says whether the server leads the stream named name.
func (m *member) leads(name string) bool {
	a, err := m.ask("leads " + name)
	return err == nil && a == "true"
}

// stop ends the server's input, so it shuts down, and waits for it; it
// returns what the server wrote on its standard error.
func (m *member) stop() string {
	m.in.Close()
	_ = m.cmd.Wait()
	return m.stderr.String()
}
