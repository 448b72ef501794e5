//go:build linux

package main

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// modeProbes tries, on each HOSTILE_CHMOD target (name=path), what a
// writable-but-not-owned view of a host file would allow: make it setuid,
// give it away, change its times and an extended attribute. Each must fail
// on a host file, whatever the agent's uid.
func modeProbes(r map[string]result) {
	for _, t := range targets("HOSTILE_CHMOD") {
		r["chmod:"+t[0]] = outcome(os.Chmod(t[1], 0o4755|os.ModeSetuid))
		r["chown:"+t[0]] = outcome(os.Lchown(t[1], os.Getuid(), os.Getgid()))
		now := time.Unix(1, 0)
		r["utimes:"+t[0]] = outcome(os.Chtimes(t[1], now, now))
		r["xattr:"+t[0]] = outcome(unix.Lsetxattr(t[1], "user.sparkles", []byte("x"), 0))
	}
}
