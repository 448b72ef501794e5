package registry

import (
	"errors"
	"fmt"
	"strings"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// ParseFlag reads one `--agent NAME=COMMAND`. COMMAND is split into words
// as a POSIX shell splits a command's arguments: blanks separate words,
// single and double quotes and backslashes keep blanks and quotes inside
// one. Nothing is expanded: a $VAR, a `command` or $(command), an unquoted
// glob, brace or ~ is refused, because it would mean one thing typed in a
// shell and another here. An agent given so has no env of its own; the
// agents file is where env goes.
func ParseFlag(s string) (name string, a Agent, err error) {
	name, command, ok := strings.Cut(s, "=")
	if !ok || name == "" || strings.TrimSpace(command) == "" {
		return "", Agent{}, fmt.Errorf("--agent %q: want NAME=COMMAND, e.g. --agent mine='/usr/local/bin/my-agent --acp'", s)
	}
	if !nameRe().MatchString(name) {
		return "", Agent{}, fmt.Errorf("--agent %q: the name %q: use 1 to 64 letters, digits, '.', '_' and '-', starting with a letter or digit", s, name)
	}
	words, err := SplitWords(command)
	if err != nil {
		return "", Agent{}, fmt.Errorf("--agent %s: %w", name, err)
	}
	if len(words) == 0 || words[0] == "" {
		return "", Agent{}, fmt.Errorf("--agent %s: the command is empty", name)
	}
	a = Agent{Command: words[0], Args: words[1:]}
	if err := a.check(); err != nil {
		return "", Agent{}, fmt.Errorf("--agent %s: %w", name, err)
	}
	return name, a, nil
}

// SplitWords splits a command line into its words by the quoting rules of
// a POSIX shell, expanding nothing; see ParseFlag.
func SplitWords(s string) ([]string, error) {
	p := syntax.NewParser()
	var words []*syntax.Word
	for w, err := range p.WordsSeq(strings.NewReader(s)) {
		if err != nil {
			var pe syntax.ParseError
			if errors.As(err, &pe) {
				return nil, fmt.Errorf("cannot split %q into words: %s; quote it as a shell would", s, pe.Text)
			}
			return nil, fmt.Errorf("cannot split %q into words: %v; quote it as a shell would", s, err)
		}
		if err := literalOnly(w); err != nil {
			return nil, fmt.Errorf("%q: %w", s, err)
		}
		words = append(words, w)
	}
	// An empty environment and no directory reader: with the checks
	// above, this is quote removal and nothing else.
	return expand.Fields(&expand.Config{Env: expand.ListEnviron()}, words...)
}

// literalOnly refuses every part of a word that a shell would expand.
func literalOnly(w *syntax.Word) error {
	for i, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.SglQuoted:
		case *syntax.Lit:
			if err := plainLit(p.Value, i == 0); err != nil {
				return err
			}
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				if _, ok := q.(*syntax.Lit); !ok {
					return errExpansion
				}
			}
		default:
			return errExpansion
		}
	}
	return nil
}

var errExpansion = errors.New("it uses $, ` or another expansion, which is not done here; write the value itself, or set the variable in the agents file's env")

// plainLit refuses unquoted characters that a shell would expand (globs,
// braces, a leading ~); an escaped one is a plain character.
func plainLit(v string, first bool) error {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			i++
		case c == '*' || c == '?' || c == '[' || c == '{' || c == '}':
			return fmt.Errorf("the unquoted %q would be expanded by a shell; quote it", string(c))
		case c == '~' && i == 0 && first:
			return errors.New("a leading ~ is not expanded here; write the path out")
		}
	}
	return nil
}
