// Package e2e holds the end-to-end tests: they build the sparkles binary
// from the module's root once, run it as a user would (serve, the CLI, the
// demo and real agents, confined), and check it from outside through HTTP,
// SSE, its exit statuses and its files; they also hold the repository's
// documents to what the binary does (docs/, README.md, server/openapi.json).
// The package has no code of its own outside its tests.
package e2e
