//go:build linux && !amd64

package confine_test

// archFilterCalls are the calls of filterCalls only this arch has: none
// beyond the common ones on arm64.
func archFilterCalls() []filterCall { return nil }
