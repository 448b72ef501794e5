package confine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// forwardMax bounds the forwarded connections one agent holds at once:
// each costs the launcher up to six descriptors of its RLIMIT_NOFILE (two
// sockets, and a pipe per direction while splicing), 6,144 of the 8,192.
// Past it new connections wait in the listen backlog.
const forwardMax = 1024

// forwardHostPorts is the launcher's side of the host ports (see
// hostports_linux.go): it listens on 127.0.0.1 and ::1 in the agent's
// network namespace on every port and forwards what it accepts through
// the server. It runs before Landlock and before the agent starts, so the
// ports are the launcher's before the agent could take one.
func forwardHostPorts(ports []int) error {
	if len(ports) == 0 {
		return nil
	}
	syscall.CloseOnExec(hostPortsFD) // the agent must not hold the server's socket
	ctl, err := unixConn(hostPortsFD, "host-ports")
	if err != nil {
		return err
	}
	f := newForwarder(ctl)
	for _, port := range ports {
		ls, err := listenLoopback(port)
		if err != nil {
			return err
		}
		for _, l := range ls {
			go f.serve(l, port)
		}
	}
	return nil
}

// listenLoopback listens on port of the namespace's 127.0.0.1 and, where
// the namespace has IPv6, ::1.
func listenLoopback(port int) ([]net.Listener, error) {
	p := strconv.Itoa(port)
	l4, err := net.Listen("tcp4", net.JoinHostPort("127.0.0.1", p))
	if err != nil {
		return nil, fmt.Errorf("host port %d: %w", port, err)
	}
	l6, err := net.Listen("tcp6", net.JoinHostPort("::1", p))
	if err != nil {
		if errors.Is(err, unix.EADDRNOTAVAIL) || errors.Is(err, unix.EAFNOSUPPORT) {
			return []net.Listener{l4}, nil // IPv6 is off in this kernel
		}
		l4.Close()
		return nil, fmt.Errorf("host port %d: %w", port, err)
	}
	return []net.Listener{l4, l6}, nil
}

// forwarder asks the server for connections, many at once: replies come
// in any order and are matched to requests by id.
type forwarder struct {
	ctl *net.UnixConn
	sem chan struct{}

	mu      sync.Mutex
	next    uint32
	waiting map[uint32]chan hostReply
	err     error // set once ctl is done: every request fails with it
}

type hostReply struct {
	conn *net.TCPConn
	err  error
}

func newForwarder(ctl *net.UnixConn) *forwarder {
	f := &forwarder{ctl: ctl, sem: make(chan struct{}, forwardMax), waiting: map[uint32]chan hostReply{}}
	go f.readReplies()
	return f
}

// serve forwards every connection l accepts to the host's port.
func (f *forwarder) serve(l net.Listener, port int) {
	for {
		f.sem <- struct{}{}
		c, err := l.Accept()
		if err != nil {
			<-f.sem
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE, ECONNABORTED: a later accept may do; a pause keeps a
			// lasting EMFILE from spinning.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go func() {
			defer func() { <-f.sem }()
			in := c.(*net.TCPConn)
			out, err := f.dial(port)
			if err != nil {
				// A reset, as the host's refusal would look to a client
				// that connected there directly.
				_ = in.SetLinger(0)
				in.Close()
				return
			}
			splice(in, out)
		}()
	}
}

// dial asks the server for a connection to the host's port.
func (f *forwarder) dial(port int) (*net.TCPConn, error) {
	ch := make(chan hostReply, 1)
	f.mu.Lock()
	if f.err != nil {
		f.mu.Unlock()
		return nil, f.err
	}
	f.next++
	id := f.next
	f.waiting[id] = ch
	f.mu.Unlock()
	req := make([]byte, hostReqLen)
	binary.BigEndian.PutUint32(req, id)
	binary.BigEndian.PutUint16(req[4:], uint16(port))
	if _, _, err := f.ctl.WriteMsgUnix(req, nil, nil); err != nil {
		f.mu.Lock()
		delete(f.waiting, id)
		f.mu.Unlock()
		return nil, err
	}
	r := <-ch
	return r.conn, r.err
}

// readReplies hands each reply to its request until the server's end
// closes; then every request fails.
func (f *forwarder) readReplies() {
	buf := make([]byte, hostReplyLen)
	oob := make([]byte, unix.CmsgSpace(4))
	var err error
	for {
		var n, oobn int
		n, oobn, _, _, err = f.ctl.ReadMsgUnix(buf, oob)
		if err == nil && n == 0 {
			err = io.EOF
		}
		if err != nil {
			break
		}
		r := hostReply{}
		fd := -1
		if fds, perr := parseRights(oob[:oobn]); perr == nil && len(fds) > 0 {
			fd = fds[0]
			for _, extra := range fds[1:] {
				unix.Close(extra)
			}
		}
		errno := syscall.Errno(binary.BigEndian.Uint32(buf[4:]))
		switch {
		case n != hostReplyLen:
			r.err = errors.New("host ports: a malformed reply")
		case errno != 0:
			r.err = errno
		case fd < 0:
			r.err = errors.New("host ports: a reply without a socket")
		default:
			r.conn, r.err = tcpConn(fd)
			fd = -1
		}
		if fd >= 0 {
			unix.Close(fd)
		}
		id := binary.BigEndian.Uint32(buf)
		f.mu.Lock()
		ch := f.waiting[id]
		delete(f.waiting, id)
		f.mu.Unlock()
		if ch == nil {
			if r.conn != nil {
				r.conn.Close()
			}
			continue
		}
		ch <- r
	}
	f.mu.Lock()
	f.err = fmt.Errorf("host ports: the server is gone: %w", err)
	for id, ch := range f.waiting {
		ch <- hostReply{err: f.err}
		delete(f.waiting, id)
	}
	f.mu.Unlock()
}

func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// tcpConn makes a *net.TCPConn of fd, which it takes over.
func tcpConn(fd int) (*net.TCPConn, error) {
	f := os.NewFile(uintptr(fd), "host-port")
	defer f.Close() // FileConn holds a duplicate
	c, err := net.FileConn(f)
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return nil, errors.New("host ports: not a TCP socket")
	}
	return tc, nil
}

// splice copies both ways between a and b (io.Copy between two TCP
// connections is splice(2): the bytes stay in the kernel). A side that
// ends its sending (EOF) has that passed on as a half-close, so requests
// that wait for the end of their input work; an error on either side
// ends both.
func splice(a, b *net.TCPConn) {
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			a.Close()
			b.Close()
		})
	}
	done := make(chan struct{}, 2)
	pass := func(dst, src *net.TCPConn) {
		if _, err := io.Copy(dst, src); err != nil {
			closeBoth()
		} else {
			_ = dst.CloseWrite()
		}
		done <- struct{}{}
	}
	go pass(b, a)
	go pass(a, b)
	<-done
	<-done
	closeBoth()
}
