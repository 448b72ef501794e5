// Package loopback serves test connections on 127.0.0.1: the listeners
// the confinement tests aim an agent at (the API's neighbours, a model
// API, a service another sandbox runs).
package loopback

import (
	"fmt"
	"net"
	"testing"
)

// Serve accepts connections on l until the test ends, closing l then, and
// runs handle for each in a goroutine of its own (nil: close it at once).
// It returns l's address.
func Serve(t testing.TB, l net.Listener, handle func(c *net.TCPConn)) *net.TCPAddr {
	t.Helper()
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if handle != nil {
					handle(c.(*net.TCPConn))
				}
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr)
}

// Listen is Serve on a new listener of 127.0.0.1.
func Listen(t testing.TB, handle func(c *net.TCPConn)) *net.TCPAddr {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return Serve(t, l, handle)
}

// Greeter answers every connection with a line, name, and returns its port:
// what a dial reached is then known by what it reads.
func Greeter(t testing.TB, name string) int {
	t.Helper()
	return Listen(t, func(c *net.TCPConn) { fmt.Fprintln(c, name) }).Port
}
