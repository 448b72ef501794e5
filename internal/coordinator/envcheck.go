package coordinator

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/translate"
)

// envName is what a variable name may be: a key such as "A=B" would smuggle
// a second variable into the agent's environment.
var envName = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
})

// hookPrefixes and hookVars are the variables through which a value makes a
// loader, a shell or an interpreter run code of the caller's choosing before
// the agent's own: with them, API access to a sandbox would be the power to
// run any file on the host. docs/security.md lists them.
var (
	hookPrefixes = []string{"LD_", "DYLD_", "BASH_FUNC_"}
	hookVars     = []string{
		"BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PROMPT_COMMAND", "PS4",
		"NODE_OPTIONS", "NODE_PATH", "NODE_REPL_EXTERNAL_MODULE",
		"PYTHONSTARTUP", "PYTHONPATH", "PYTHONHOME", "PYTHONINSPECT",
		"PERL5OPT", "PERL5LIB", "PERLLIB", "RUBYOPT", "RUBYLIB",
		"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS",
		"GCONV_PATH", "GIT_EXEC_PATH", "GIT_SSH_COMMAND", "GIT_CONFIG_GLOBAL",
	}
)

// checkEnv refuses sandbox env and secrets that could not be, or must not
// be, an agent's environment variables.
func checkEnv(field string, m map[string]string) error {
	for k, v := range m {
		if !envName().MatchString(k) {
			return sandbox.Errorf(sandbox.EInvalidRequest, "%s key %q is not a variable name: use letters, digits and _, not starting with a digit", field, k)
		}
		if strings.ContainsRune(v, 0) {
			return sandbox.Errorf(sandbox.EInvalidRequest, "%s[%q] holds a NUL byte", field, k)
		}
		if isHookVar(k) {
			return sandbox.Errorf(sandbox.EInvalidRequest, "%s key %s is refused: it makes a loader or interpreter run code before the agent (see docs/security.md)", field, k)
		}
	}
	return nil
}

func isHookVar(k string) bool {
	u := strings.ToUpper(k)
	if slices.Contains(hookVars, u) {
		return true
	}
	for _, p := range hookPrefixes {
		if strings.HasPrefix(u, p) {
			return true
		}
	}
	return false
}

// checkNoNUL refuses a NUL byte in any key or value of m: no string the
// server keeps or hands on may hold one.
func checkNoNUL(field string, m map[string]string) error {
	for k, v := range m {
		if strings.ContainsRune(k, 0) || strings.ContainsRune(v, 0) {
			return sandbox.Errorf(sandbox.EInvalidRequest, "%s holds a NUL byte", field)
		}
	}
	return nil
}

// redactions are the values redacted from every string of sandbox id: its
// secrets, the credentials the operator gives any agent (registry env and
// pass_env; translate.OperatorValues tells which values) and the server's
// own (Config.Redact), sorted so that a translator built twice redacts the
// same way.
func (c *Coordinator) redactions(id string, secrets map[string]string) []string {
	out := make([]string, 0, len(secrets)+2)
	for _, v := range secrets {
		out = append(out, v)
	}
	for _, a := range c.cfg.Agents {
		out = append(out, translate.OperatorValues(a.Environ(os.LookupEnv))...)
	}
	if c.cfg.Redact != nil {
		out = append(out, c.cfg.Redact(id)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// redactMetadata replaces, in every metadata value, the sandbox's secrets,
// the server's own values and credential shapes with [REDACTED]: metadata
// is answered verbatim ever after.
func (c *Coordinator) redactMetadata(id string, md map[string]string, secrets map[string]string) map[string]string {
	if len(md) == 0 {
		return md
	}
	red := translate.NewRedactor(c.redactions(id, secrets))
	out := make(map[string]string, len(md))
	for k, v := range md {
		out[k] = red(v)
	}
	return out
}
