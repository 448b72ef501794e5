//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The memory probes take what they can of the machine's memory:
//
//	HOSTILE_MEMORY  name=MiB: allocate and touch MiB of private memory in
//	                the agent's own process; name=MiB/N: spread over N
//	                child processes, so that no one process is large
//	HOSTILE_FILL    name=DIR:MiB: write a file of MiB into DIR (/tmp and
//	                /dev/shm are tmpfs: memory)
//	HOSTILE_RESERVE name=MiB: map MiB of writable memory without touching
//	                it, as sanitizers and runtimes reserve address space
//
// Each writes how many MiB it holds so far to memory-NAME[-i].progress in
// the working directory as it goes, so that a test can tell how far it got
// before it was stopped. A probe that is not stopped frees what it took and
// reports the MiB it held in Detail.
const chunk = 4 << 20

func memoryProbes(r map[string]result) {
	for _, t := range targets("HOSTILE_MEMORY") {
		total, procs := t[1], "1"
		if a, b, ok := strings.Cut(t[1], "/"); ok {
			total, procs = a, b
		}
		mib, _ := strconv.Atoi(total)
		n, _ := strconv.Atoi(procs)
		r["memory:"+t[0]] = allocSpread(t[0], mib, max(n, 1))
	}
	for _, t := range targets("HOSTILE_RESERVE") {
		mib, _ := strconv.Atoi(t[1])
		m, err := syscall.Mmap(-1, 0, mib<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
		if err == nil {
			syscall.Munmap(m)
		}
		r["reserve:"+t[0]] = outcome(err)
	}
	for _, t := range targets("HOSTILE_FILL") {
		dir, size, _ := strings.Cut(t[1], ":")
		mib, _ := strconv.Atoi(size)
		r["fill:"+t[0]] = fill(t[0], dir, mib)
	}
}

// allocSpread allocates mib MiB in n processes: this one when n is 1.
func allocSpread(name string, mib, n int) result {
	if n == 1 {
		held, err := alloc(mib, progressFile(name))
		res := outcome(err)
		res.Detail = strconv.Itoa(held)
		return res
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command("/proc/self/exe", "alloc", strconv.Itoa(mib/n), progressFile(fmt.Sprintf("%s-%d", name, i)))
			cmd.Stderr = os.Stderr
			errs[i] = cmd.Run()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return result{Err: err.Error()}
		}
	}
	return result{OK: true, Detail: strconv.Itoa(mib)}
}

// allocMain is a child of allocSpread: it allocates, holds what it got
// until its siblings are done with theirs, and exits.
func allocMain(args []string) {
	mib, _ := strconv.Atoi(args[0])
	if _, err := alloc(mib, args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "hostileagent: alloc:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func progressFile(name string) string { return "memory-" + name + ".progress" }

// alloc maps mib MiB of private memory and touches every page of it,
// telling its progress every chunk; it unmaps it all before returning.
func alloc(mib int, progress string) (int, error) {
	f, err := os.Create(progress)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var maps [][]byte
	defer func() {
		for _, m := range maps {
			syscall.Munmap(m)
		}
	}()
	page := os.Getpagesize()
	for held := 0; held < mib<<20; held += chunk {
		m, err := syscall.Mmap(-1, 0, chunk, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		if err != nil {
			return held >> 20, err
		}
		for i := 0; i < len(m); i += page {
			m[i] = 1
		}
		maps = append(maps, m)
		f.WriteAt([]byte(strconv.Itoa((held+chunk)>>20)+"\n"), 0)
	}
	return mib, nil
}

// fill writes mib MiB into a file in dir, and removes it; when dir is
// full first, it keeps what it wrote, as an agent that means harm would.
func fill(name, dir string, mib int) result {
	progress, err := os.Create(progressFile(name))
	if err != nil {
		return outcome(err)
	}
	defer progress.Close()
	f, err := os.CreateTemp(dir, "hostile-fill-")
	if err != nil {
		return outcome(err)
	}
	defer f.Close()
	block := make([]byte, chunk)
	for i := range block {
		block[i] = byte(i)
	}
	for held := 0; held < mib<<20; held += chunk {
		n, err := f.Write(block)
		if err != nil {
			return result{Err: err.Error(), Detail: strconv.Itoa((held + n) >> 20)}
		}
		progress.WriteAt([]byte(strconv.Itoa((held+chunk)>>20)+"\n"), 0)
	}
	os.Remove(f.Name())
	return result{OK: true, Detail: strconv.Itoa(mib) + " MiB in " + filepath.Base(f.Name())}
}
