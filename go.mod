module github.com/sparkles-dev/sparkles

go 1.26.8

require (
	github.com/coder/acp-go-sdk v0.13.5
	github.com/julienschmidt/httprouter v1.3.0
	github.com/oklog/ulid/v2 v2.1.2
	github.com/urfave/cli/v2 v2.27.7
	go.etcd.io/bbolt v1.4.3
	golang.org/x/term v0.28.0
)

require (
	github.com/cpuguy83/go-md2man/v2 v2.0.7 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // indirect
	golang.org/x/sys v0.29.0 // indirect
)
