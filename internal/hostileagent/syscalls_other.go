//go:build linux && !amd64

package main

import "runtime"

// x32 and i386 are ABIs of amd64 only; elsewhere the probes say so.
func x32(string) result  { return result{Err: "no x32 ABI on " + runtime.GOARCH} }
func i386(string) result { return result{Err: "no i386 ABI on " + runtime.GOARCH} }
func i386Child() result  { return i386("") }
