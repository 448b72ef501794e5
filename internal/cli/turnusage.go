package cli

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// usageLine is the gist of a running turn's usage (turn.usage): what its
// context holds, of how large a window, and its cost so far.
func usageLine(u *sandbox.Usage) string {
	var say []string
	if u.ContextTokens > 0 {
		s := "context " + thousands(u.ContextTokens)
		if u.ContextWindow > 0 {
			s += " of " + thousands(u.ContextWindow)
		}
		say = append(say, s+" tokens")
	}
	if u.Cost != nil {
		say = append(say, costWords(u.Cost))
	}
	if len(say) == 0 {
		return "no figures"
	}
	return strings.Join(say, " · ")
}

// costWords is a cost as an amount and its currency: four decimals under
// one unit, where agents' costs mostly are, else two.
func costWords(c *sandbox.Cost) string {
	prec := 2
	if c.Amount < 1 {
		prec = 4
	}
	return fmt.Sprintf("%.*f %s", prec, c.Amount, c.Currency)
}

// thousands writes n with commas between groups of three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
