package cli

import (
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/sparkles-dev/sparkles/internal/app"
	"golang.org/x/term"
)

// greet tells the person who started serve on a terminal how to begin: a
// link that signs the console in (its #token= fragment never reaches the
// server, and the page removes it from the address bar) and a first
// command. The link carries the token, so it goes to a terminal's stdout
// only, never to a pipe, a file or the log.
func greet(out *os.File, m *app.Main) {
	if !term.IsTerminal(int(out.Fd())) {
		return
	}
	token, path := m.ServedToken()
	writeGreeting(out, m.Listener.Addr(), m.DataDir, token, path != "")
}

func writeGreeting(w io.Writer, addr net.Addr, dataDir, token string, fromFile bool) {
	base := "http://" + browserHost(addr)
	cmd := "sparkles prompt"
	if base != defaultURL {
		cmd += " --url " + base
	}
	switch {
	case !fromFile:
		// Given by --token or SPARKLES_TOKEN: a new shell may not have it.
		cmd += " --token " + shellQuote(token)
	case dataDir != defaultDataDir():
		cmd += " --data-dir " + shellQuote(dataDir)
	}
	fmt.Fprintf(w, "\nSign in to the console: %s/#token=%s\n", base, token)
	fmt.Fprintf(w, "Then try, in another terminal: %s %s\n\n", cmd, shellQuote("hello, please write notes.txt"))
}

// browserHost is where a browser on this machine reaches addr: a server
// listening on every address is reached on loopback.
func browserHost(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.,/:=@+%") == "" {
		return s
	}
	if !strings.ContainsAny(s, `"$`+"`\\!") {
		return `"` + s + `"`
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
