// Command mercure is the Mercure hub as its project ships it: Caddy with
// the Mercure module (github.com/dunglas/mercure/caddy) and Caddy's
// standard modules, the build that `mercure run` is. `sparkles bench
// --scenario peer-store --mercure-hub PATH` times its cold start on the
// same bolt file as mercure-peer's (internal/bench/mercure), which runs the
// hub's library alone.
//
// It is a module of its own so that neither the main module nor
// mercure-peer depends on Caddy. Build it with:
//
//	cd internal/bench/mercurehub && go build -o mercure .
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	// Caddy's standard modules and the Mercure module, as in the hub's
	// own build.
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/dunglas/mercure/caddy"
)

func main() {
	caddycmd.Main()
}
