package confine

// The seccomp filter's parts, for seccomp_test.go.
var (
	InstallSeccomp = installSeccomp
	SeccompProgram = seccompProgram
	SeccompGroups  = seccompGroups
)
