// Command sparkles runs AI coding agents in sandboxes and serves one durable,
// resumable, curated event stream per sandbox. The same binary is the server
// (sparkles serve), the client (sparkles sandbox|prompt|events|…) and a
// scripted demo agent (sparkles agent demo); internal/cli has its commands.
package main

import (
	"os"

	"github.com/sparkles-dev/sparkles/internal/cli"
	"github.com/sparkles-dev/sparkles/internal/confine"
)

func main() {
	if confine.IsEntry(os.Args) {
		// serve re-executes this binary to start each agent confined.
		confine.Main()
	}
	os.Exit(cli.Main(os.Args))
}
