package cli

import "github.com/urfave/cli/v2"

// Flag names, worked out once.
//
// urfave/cli asks a flag for its names (Names) over and over while it
// parses a command line: once per flag to run the flags' actions, and for
// each flag not set on the line once per flag before it in the list, to
// find it again (Context.IsSet → lookupFlag). Each answer runs a regular
// expression over each name and allocates, so the parse of serve's 40-odd
// flags made about 900 such answers: 1 ms of its start on a small VM, the
// largest part of the work between main and the server's first answer that
// is the CLI's own. keepNames gives each flag a Names that returns the
// names it had when the command tree was built; every other method is the
// flag's own, embedded, so help, parsing, the environment and the flags'
// actions see the same flag.

// Each wrapper embeds one flag type the commands use. A type without a
// wrapper stays as it is: correct, at the old cost (TestKeepNames lists
// the flags left so).
type (
	namedBool struct {
		*cli.BoolFlag
		names []string
	}
	namedDuration struct {
		*cli.DurationFlag
		names []string
	}
	namedInt struct {
		*cli.IntFlag
		names []string
	}
	namedIntSlice struct {
		*cli.IntSliceFlag
		names []string
	}
	namedString struct {
		*cli.StringFlag
		names []string
	}
	namedStringSlice struct {
		*cli.StringSliceFlag
		names []string
	}
	namedUint64 struct {
		*cli.Uint64Flag
		names []string
	}
)

func (f namedBool) Names() []string        { return f.names }
func (f namedDuration) Names() []string    { return f.names }
func (f namedInt) Names() []string         { return f.names }
func (f namedIntSlice) Names() []string    { return f.names }
func (f namedString) Names() []string      { return f.names }
func (f namedStringSlice) Names() []string { return f.names }
func (f namedUint64) Names() []string      { return f.names }

func (f namedBool) base() cli.Flag        { return f.BoolFlag }
func (f namedDuration) base() cli.Flag    { return f.DurationFlag }
func (f namedInt) base() cli.Flag         { return f.IntFlag }
func (f namedIntSlice) base() cli.Flag    { return f.IntSliceFlag }
func (f namedString) base() cli.Flag      { return f.StringFlag }
func (f namedStringSlice) base() cli.Flag { return f.StringSliceFlag }
func (f namedUint64) base() cli.Flag      { return f.Uint64Flag }

// baseFlag is the urfave/cli flag itself, for a switch on its type.
func baseFlag(f cli.Flag) cli.Flag {
	if w, ok := f.(interface{ base() cli.Flag }); ok {
		return w.base()
	}
	return f
}

// keepNames gives the flags of cmds and of their subcommands names worked
// out once. A hidden flag stays as it is: urfave/cli's suggestions find a
// hidden boolean flag by its type to leave it out.
func keepNames(cmds []*cli.Command) {
	for _, c := range cmds {
		for i, f := range c.Flags {
			if v, ok := f.(cli.VisibleFlag); ok && !v.IsVisible() {
				continue
			}
			c.Flags[i] = named(f)
		}
		keepNames(c.Subcommands)
	}
}

// named is f with its names kept, when its type has a wrapper.
func named(f cli.Flag) cli.Flag {
	names := f.Names()
	switch f := f.(type) {
	case *cli.BoolFlag:
		return namedBool{f, names}
	case *cli.DurationFlag:
		return namedDuration{f, names}
	case *cli.IntFlag:
		return namedInt{f, names}
	case *cli.IntSliceFlag:
		return namedIntSlice{f, names}
	case *cli.StringFlag:
		return namedString{f, names}
	case *cli.StringSliceFlag:
		return namedStringSlice{f, names}
	case *cli.Uint64Flag:
		return namedUint64{f, names}
	}
	return f
}
