package confine

// The seccomp filter's parts, for seccomp_test.go.
var (
	InstallSeccomp    = installSeccomp
	SeccompProgramFor = seccompProgramFor
	SyscallNumbers    = syscallNumbers
)

// SeccompCalls is the name of every call the filter denies on goarch.
func SeccompCalls(goarch string) []string {
	var names []string
	for _, g := range seccompGroups(goarch) {
		for _, c := range g.calls {
			names = append(names, c.name)
		}
	}
	return names
}
