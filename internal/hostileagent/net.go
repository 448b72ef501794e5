//go:build linux

package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// netProbes: what the agent reaches over the network, and what it serves.
//
//	HOSTILE_LISTEN    ports to serve on 127.0.0.1 (name=port, 0 for any) for
//	                  as long as the agent lives: each connection reads one
//	                  line, "served-by-" and HOSTILE_MARKER; the result's
//	                  detail is the port, and it is ok once the agent has
//	                  read its own line back
//	HOSTILE_FETCH     TCP addresses to connect to and read one line from
//	                  (the detail)
//	HOSTILE_UNIXPATH  unix sockets to connect to by path
func netProbes(r map[string]result) {
	for _, t := range targets("HOSTILE_LISTEN") {
		r["listen:"+t[0]] = serve(t[1])
	}
	for _, t := range targets("HOSTILE_FETCH") {
		line, err := fetch(t[1])
		res := outcome(err)
		res.Detail = line
		r["fetch:"+t[0]] = res
	}
	for _, t := range targets("HOSTILE_UNIXPATH") {
		c, err := net.DialTimeout("unix", t[1], 5*time.Second)
		if err == nil {
			c.Close()
		}
		r["unixpath:"+t[0]] = outcome(err)
	}
}

// serve listens on 127.0.0.1:port and answers every connection with a
// line naming this agent, until it exits.
func serve(port string) result {
	l, err := net.Listen("tcp4", "127.0.0.1:"+port)
	if err != nil {
		return outcome(err)
	}
	line := "served-by-" + os.Getenv("HOSTILE_MARKER")
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, line)
			c.Close()
		}
	}()
	p := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	got, err := fetch("127.0.0.1:" + p)
	if err == nil && got != line {
		err = fmt.Errorf("read back %q", got)
	}
	res := outcome(err)
	res.Detail = p
	return res
}

// fetch connects to addr and reads one line.
func fetch(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && line == "" {
		return "", fmt.Errorf("no line: %w", err)
	}
	return strings.TrimSpace(line), nil
}
