package server

// A stream is written one way: through its http.ResponseWriter, as mercure's
// subscribe handler writes. http.ResponseController flushes each batch,
// responseWriter moves the connection's write deadline (a client that
// takes no bytes for WriteTimeout is dropped), net/http sees the client
// leave and ends the request's context, and Shutdown cancels the server's
// context, which ends every stream, before http.Server.Shutdown waits for
// their handlers. A second way, which took each HTTP/1.1 stream's
// connection from net/http and wrote every flush as one chunk in one
// write, met no target this one misses. In alternating runs on two cores
// (sparkles bench, idle and fanout, three each, 2026-12-05, load average
// 2.2-12.6 from other work) an idle connection cost 25.2-25.4 KiB with it
// and 28.8-28.9 KiB without, both under the 32 KiB target; at 200
// events/s to 1,000 subscribers the server's CPU per delivery was 8.0-9.1
// against 7.4-11.2 µs and the p99 149-319 against 95-294 ms, the 50 ms
// target missed either way (on a quiet machine, 2026-12-01: 6.6-7.0
// against 7.2-7.5 µs, 24.7 against 28.1 KiB). It needed its own reader of
// each connection to see the client leave, its own chunked encoding, and a
// count of the connections it took for Shutdown to wait on.
