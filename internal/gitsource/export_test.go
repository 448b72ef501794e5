package gitsource

// Classify is what Clone makes of git's output when the step failed.
func Classify(j Job, step, out string) *Failure {
	r := &run{j: j}
	return r.classify(step, out)
}
