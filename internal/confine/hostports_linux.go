package confine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Host ports: an agent's network namespace has a loopback of its own, so
// the host's (the API, other sandboxes' servers, a developer's database)
// is out of its reach. The ports the operator names are the exception: the
// launcher listens on them inside the namespace (forward_linux.go) and, for
// each connection it accepts, asks the server over a unix socket pair for a
// connection to the host's port. The server checks the port, dials it and
// hands the connected socket back (SCM_RIGHTS); the launcher splices the
// two. The namespace never holds a socket that could connect anywhere
// else, and a launcher can only ever get connections to its agent's ports.
//
// The wire format, one SOCK_SEQPACKET message each way per connection:
// a request is the request id (uint32) and the port (uint16), big endian,
// padded to hostReqLen; a reply is the id and an errno (uint32), 0 with the
// connected socket attached.

// hostPortsFD is the launcher's end of the socket pair: beside the spec
// pipe, fd 3.
const hostPortsFD = 4

const (
	hostReqLen   = 8
	hostReplyLen = 8
	// hostDialTimeout bounds one dial of the host's loopback: a listener
	// whose backlog is full leaves a connect hanging.
	hostDialTimeout = 10 * time.Second
	// hostDialsInFlight bounds the server's dials for one agent at once;
	// the launcher bounds the connections it holds (forwardMax).
	hostDialsInFlight = 64
)

// checkPorts validates TCP ports named by the operator and returns them
// sorted, without duplicates.
func checkPorts(field string, ports []int) ([]int, error) {
	for _, p := range ports {
		if p < 1 || p > 65535 {
			return nil, &OptionError{field, fmt.Sprintf("%d: want a TCP port from 1 to 65535", p)}
		}
	}
	out := slices.Clone(ports)
	slices.Sort(out)
	return slices.Compact(out), nil
}

// hostPortPair makes the socket pair of one launcher: ours for the server,
// theirs for the launcher to inherit as hostPortsFD.
func hostPortPair() (ours *net.UnixConn, theirs *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("host ports: %w", err)
	}
	ours, err = unixConn(fds[0], "host-ports")
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, err
	}
	return ours, os.NewFile(uintptr(fds[1]), "host-ports"), nil
}

// unixConn makes a *net.UnixConn of fd, which it takes over.
func unixConn(fd int, name string) (*net.UnixConn, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close() // FileConn holds a duplicate
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("%s: not a unix socket", name)
	}
	return uc, nil
}

// hostPortServer answers one launcher's requests.
type hostPortServer struct {
	c       *net.UnixConn
	allowed []int
	logger  *slog.Logger
	dial    func(ctx context.Context, port int) (*net.TCPConn, error)
	wg      sync.WaitGroup
}

// serveHostPorts answers the requests that come on c, for the ports
// allowed, until c closes (the launcher is gone, or stop was called).
// stop closes c and waits for the dials in flight.
func serveHostPorts(c *net.UnixConn, allowed []int, logger *slog.Logger) (stop func()) {
	s := &hostPortServer{c: c, allowed: allowed, logger: logger, dial: dialHostPort}
	ctx, cancel := context.WithCancel(context.Background())
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.loop(ctx)
	}()
	return func() {
		cancel()
		c.Close()
		s.wg.Wait()
	}
}

func (s *hostPortServer) loop(ctx context.Context) {
	sem := make(chan struct{}, hostDialsInFlight)
	buf := make([]byte, hostReqLen)
	for {
		n, _, _, _, err := s.c.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			return // the launcher is gone: n == 0 is its end closing
		}
		if n != hostReqLen {
			s.logger.Warn("host ports: a malformed request from a launcher", "bytes", n)
			return
		}
		id := binary.BigEndian.Uint32(buf)
		port := int(binary.BigEndian.Uint16(buf[4:]))
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		s.wg.Add(1)
		go func() {
			defer func() { <-sem; s.wg.Done() }()
			s.answer(ctx, id, port)
		}()
	}
}

// answer dials port for request id and replies with the socket or why not.
func (s *hostPortServer) answer(ctx context.Context, id uint32, port int) {
	reply := make([]byte, hostReplyLen)
	binary.BigEndian.PutUint32(reply, id)
	if !slices.Contains(s.allowed, port) {
		// The launcher listens on the allowed ports only: asking for
		// another is a launcher that is not ours.
		s.logger.Warn("host ports: a launcher asked for a port it was not given", "port", port)
		binary.BigEndian.PutUint32(reply[4:], uint32(unix.EACCES))
		_, _, _ = s.c.WriteMsgUnix(reply, nil, nil)
		return
	}
	conn, err := s.dial(ctx, port)
	if err != nil {
		s.logger.Debug("host ports: dial", "port", port, "err", err)
		binary.BigEndian.PutUint32(reply[4:], uint32(errnoOf(err)))
		_, _, _ = s.c.WriteMsgUnix(reply, nil, nil)
		return
	}
	defer conn.Close()
	f, err := conn.File()
	if err != nil {
		binary.BigEndian.PutUint32(reply[4:], uint32(errnoOf(err)))
		_, _, _ = s.c.WriteMsgUnix(reply, nil, nil)
		return
	}
	defer f.Close()
	_, _, _ = s.c.WriteMsgUnix(reply, unix.UnixRights(int(f.Fd())), nil)
}

// dialHostPort connects to the host's loopback on port: 127.0.0.1, or ::1
// where nothing listens on 127.0.0.1 (a server bound to "localhost" may
// have taken either).
func dialHostPort(ctx context.Context, port int) (*net.TCPConn, error) {
	d := net.Dialer{Timeout: hostDialTimeout}
	c, err := d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if errors.Is(err, syscall.ECONNREFUSED) {
		if c6, err6 := d.DialContext(ctx, "tcp6", net.JoinHostPort("::1", strconv.Itoa(port))); err6 == nil {
			c, err = c6, nil
		}
	}
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// errnoOf is the errno an error carries, for the launcher's reply; one
// that carries none is ECONNREFUSED, what a client understands.
func errnoOf(err error) syscall.Errno {
	var errno syscall.Errno
	if errors.As(err, &errno) && errno != 0 {
		return errno
	}
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return syscall.ETIMEDOUT
	}
	return syscall.ECONNREFUSED
}
