//go:build linux

package confine

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/internal/loopback"
	"golang.org/x/sys/unix"
)

// hostService listens on the host's 127.0.0.1 and runs serve for every
// connection until the test ends.
func hostService(t *testing.T, serve func(c *net.TCPConn)) int {
	return loopback.Listen(t, serve).Port
}

// unusedPort is a port of 127.0.0.1 where nothing listens.
func unusedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// forwardPair runs the server's side of the host ports for allowed and a
// forwarder on its other end, as a launcher has it.
func forwardPair(t *testing.T, allowed ...int) *forwarder {
	t.Helper()
	ours, theirs, err := hostPortPair()
	if err != nil {
		t.Fatal(err)
	}
	stop := serveHostPorts(ours, allowed, slog.New(slog.DiscardHandler))
	ctl := launcherEnd(t, theirs)
	t.Cleanup(func() { ctl.Close(); stop() })
	return newForwarder(ctl)
}

// launcherEnd is the launcher's end of the pair as forwardHostPorts makes
// it of its inherited descriptor.
func launcherEnd(t *testing.T, theirs *os.File) *net.UnixConn {
	t.Helper()
	defer theirs.Close()
	fd, err := unix.Dup(int(theirs.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := unixConn(fd, "host-ports")
	if err != nil {
		t.Fatal(err)
	}
	return ctl
}

// entry is what the agent connects to: a listener standing in for the
// launcher's in the namespace, forwarding to the host's port.
func entry(t *testing.T, f *forwarder, port int) string {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go f.serve(l, port)
	return l.Addr().String()
}

// digest answers, once its client has finished sending, the length and
// SHA-256 of what it received: it needs the half-close passed on.
func digest(c *net.TCPConn) {
	h := sha256.New()
	n, err := io.Copy(h, c)
	if err != nil {
		return
	}
	c.Write(append(binary.BigEndian.AppendUint64(nil, uint64(n)), h.Sum(nil)...))
}

func TestForwarder(t *testing.T) {
	echo := hostService(t, func(c *net.TCPConn) { io.Copy(c, c) })
	sum := hostService(t, digest)
	refused := unusedPort(t)
	// A host listener that is not allowed: what it has queued after the
	// test is what the server dialed.
	secret, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer secret.Close()
	notAllowed := secret.Addr().(*net.TCPAddr).Port
	f := forwardPair(t, echo, sum, refused)

	t.Run("ManyConnections", func(t *testing.T) {
		addr := entry(t, f, echo)
		const conns, size = 200, 256 << 10
		var wg sync.WaitGroup
		errs := make(chan error, conns)
		for range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- echoOnce(addr, size)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("HalfClose", func(t *testing.T) {
		c, err := net.Dial("tcp4", entry(t, f, sum))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		body := make([]byte, 3<<20)
		rand.Read(body)
		if _, err := c.Write(body); err != nil {
			t.Fatal(err)
		}
		c.(*net.TCPConn).CloseWrite() // the service answers only after this reaches it
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		got, err := io.ReadAll(c)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(body)
		if want := append(binary.BigEndian.AppendUint64(nil, uint64(len(body))), h[:]...); !bytes.Equal(got, want) {
			t.Fatalf("the service answered %x, want %x", got, want)
		}
	})
	t.Run("Refused", func(t *testing.T) {
		if err := wantReset(entry(t, f, refused)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("NotAllowed", func(t *testing.T) {
		if err := wantReset(entry(t, f, notAllowed)); err != nil {
			t.Fatal(err)
		}
		// The server answered before the client saw its reset; had it
		// dialed, the connection would wait in the backlog now.
		secret.(*net.TCPListener).SetDeadline(time.Now())
		if c, err := secret.Accept(); err == nil {
			c.Close()
			t.Fatal("the server dialed a port it was not given")
		}
	})
	t.Run("NotAllowedNoSocket", func(t *testing.T) {
		// A launcher that asks anyway gets EACCES and no descriptor.
		ours, theirs, err := hostPortPair()
		if err != nil {
			t.Fatal(err)
		}
		defer theirs.Close()
		stop := serveHostPorts(ours, []int{echo}, slog.New(slog.DiscardHandler))
		defer stop()
		req := make([]byte, hostReqLen)
		binary.BigEndian.PutUint32(req, 7)
		binary.BigEndian.PutUint16(req[4:], uint16(notAllowed))
		fd := int(theirs.Fd())
		if _, err := unix.Write(fd, req); err != nil {
			t.Fatal(err)
		}
		buf, oob := make([]byte, 64), make([]byte, 64)
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n != hostReplyLen || binary.BigEndian.Uint32(buf) != 7 || syscall.Errno(binary.BigEndian.Uint32(buf[4:])) != unix.EACCES || oobn != 0 {
			t.Fatalf("reply %x with %d bytes of control data, want id 7, EACCES and no socket", buf[:n], oobn)
		}
	})
	t.Run("ServerGone", func(t *testing.T) {
		ours, theirs, err := hostPortPair()
		if err != nil {
			t.Fatal(err)
		}
		ctl := launcherEnd(t, theirs)
		defer ctl.Close()
		g := newForwarder(ctl)
		ours.Close()
		if c, err := g.dial(echo); err == nil {
			c.Close()
			t.Fatal("a forwarder whose server is gone got a connection")
		}
	})
}

// echoOnce sends size random bytes through addr and checks they come back.
func echoOnce(addr string, size int) error {
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	body := make([]byte, size)
	rand.Read(body)
	go func() {
		c.Write(body)
		c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, body) {
		return errors.New("the echo differs from what was sent (" + strconv.Itoa(len(got)) + " bytes back of " + strconv.Itoa(size) + ")")
	}
	return nil
}

// wantReset connects to addr and wants the connection ended without a
// byte: reset, as the host's refusal.
func wantReset(addr string) error {
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		return nil // refused outright is as good
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := c.Read(make([]byte, 1))
	switch {
	case n > 0:
		return errors.New("read a byte from a connection the host refused")
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errors.New("the connection stayed open")
	case !errors.Is(err, syscall.ECONNRESET):
		return errors.New("want a reset, got " + err.Error())
	}
	return nil
}
