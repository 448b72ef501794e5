//go:build linux

package main

import (
	"os"
	"strconv"
	"time"
)

// diskProbes runs HOSTILE_DISK=name=N: it writes N MiB into disk-<name>
// in the working directory, as an agent filling its workspace does (a
// build, a download), and then keeps the turn open, as one that goes on
// working would: it never returns, so the turn ends only when the server
// stops the agent, and no report follows. A write the disk refuses ends
// the fill early, and the hold all the same. disk-<name>.done says how
// far it got.
func diskProbes() {
	ts := targets("HOSTILE_DISK")
	if len(ts) == 0 {
		return
	}
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(i) // not zeros: nothing below may store them sparse
	}
	for _, t := range ts {
		mib, _ := strconv.Atoi(t[1])
		written := 0
		if f, err := os.Create("disk-" + t[0]); err == nil {
			for ; written < mib; written++ {
				if _, err := f.Write(block); err != nil {
					break
				}
			}
			f.Close()
		}
		os.WriteFile("disk-"+t[0]+".done", []byte(strconv.Itoa(written)), 0o600)
	}
	for {
		time.Sleep(time.Hour)
	}
}
