//go:build !unix

package nobody

import "syscall"

// There is no nobody to be elsewhere: Also returns before it asks.
func sysProcAttr() *syscall.SysProcAttr { return nil }
