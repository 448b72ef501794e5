package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// EnvChildFloor makes the child process of the floor scenario a bare SSE
// writer (runFloorChild) instead of the server.
const EnvChildFloor = "SPARKLES_BENCH_FLOOR"

// runFloor measures what the machine itself costs the latency and fan-out
// loads: the same subscribers, the same child process and the same
// requests, against a writer that does the least any Go server can do for
// them. It keeps each sandbox's frames in memory, ready to write; a stream
// is a goroutine woken by a channel close, which writes what is new in one
// write; there is no store, no sync, no routing and no encoding on the way
// out. A server that stores, syncs and routes each event before it writes
// it does all of this and more, so its p99 at these loads is at least
// about this one's, give or take the runs' spread.
func runFloor(ctx context.Context, r *runner) error {
	d := pick(r, 10*time.Second, 500*time.Millisecond)
	if err := latencyChild(ctx, r, floorServer, pick(r, 1000, 20), pick(r, 20000.0, 1000.0), d); err != nil {
		return err
	}
	for _, rate := range pick(r, []float64{20, 200}, []float64{50}) {
		if err := fanoutChild(ctx, r, floorServer, rate); err != nil {
			return err
		}
	}
	return nil
}

// childServer is what a child process serves: the server, or the floor.
type childServer struct {
	env    []string // for the child, beside EnvChild
	prefix string   // of the figures' names
	target bool     // whether the figures are held to their targets
	what   string   // the server, in the figures' conditions
}

var (
	realServer  = childServer{target: true, what: "the server in a child process"}
	floorServer = childServer{env: []string{EnvChildFloor + "=1"}, prefix: "floor: ",
		what: "a bare SSE writer in a child process (no store, no routing, no encoding: frames kept ready in memory)"}
)

// targetOf is target for the server, and none for the floor, which only
// shows how much of it the machine takes.
func (srv childServer) targetOf(target time.Duration) time.Duration {
	if !srv.target {
		return 0
	}
	return target
}

// floorLog is one sandbox's frames in the floor child.
type floorLog struct {
	mu     sync.Mutex
	frames [][]byte      // frames[i] is event i+1's
	wake   chan struct{} // closed, and replaced, by each append
}

func (fl *floorLog) append(frame []byte) {
	fl.mu.Lock()
	fl.frames = append(fl.frames, frame)
	close(fl.wake)
	fl.wake = make(chan struct{})
	fl.mu.Unlock()
}

// after returns the frames after event cursor, and the channel the next
// append closes.
func (fl *floorLog) after(cursor uint64) ([][]byte, <-chan struct{}) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.frames[cursor:], fl.wake
}

// floor is the floor child's state.
type floor struct {
	mu        sync.Mutex
	logs      map[string]*floorLog
	streams   atomic.Int64
	delivered atomic.Int64
	writes    atomic.Int64
}

func (f *floor) log(id string) *floorLog {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.logs[id]
}

// runFloorChild answers the child protocol's create, load, stop, mem, cpu
// and profile as RunChild does, for the floor.
func runFloorChild(ctx context.Context, in io.Reader, out io.Writer) error {
	raiseFileLimit(1 << 20)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	f := &floor{logs: map[string]*floorLog{}}
	go f.accept(ln)
	defer cpuProfile("")
	var ld *floorLoader
	defer func() {
		if ld != nil {
			ld.stop()
		}
	}()
	return answer(in, out, childReply{Addr: ln.Addr().String()}, func(req childRequest, rep *childReply) error {
		var err error
		switch req.Op {
		case "create":
			f.mu.Lock()
			for range req.N {
				id := "floor" + strconv.Itoa(len(f.logs))
				f.logs[id] = &floorLog{wake: make(chan struct{})}
				rep.IDs = append(rep.IDs, id)
			}
			f.mu.Unlock()
		case "load":
			if ld != nil {
				err = errors.New("a load is already running")
				break
			}
			logs := make([]*floorLog, len(req.IDs))
			for i, id := range req.IDs {
				if logs[i] = f.log(id); logs[i] == nil {
					err = fmt.Errorf("no sandbox %q", id)
				}
			}
			if err == nil {
				ld = startFloorLoader(ctx, req.IDs, logs, req.Rate, req.Size)
			}
		case "stop":
			if ld != nil {
				rep.Appended, rep.Lasts = ld.stop()
				ld = nil
			}
		case "mem":
			rep.Goroutines = runtime.NumGoroutine()
		case "profile":
			err = writeProfiles(req.Path)
		case "cpu":
			err = cpuProfile(req.Path)
		default:
			err = fmt.Errorf("the floor has no op %q", req.Op)
		}
		rep.Streams, rep.Delivered, rep.Writes = f.streams.Load(), f.delivered.Load(), f.writes.Load()
		return err
	})
}

func (f *floor) accept(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			f.stream(conn)
		}()
	}
}

// stream answers one stream request: a snapshot frame, then every frame of
// the sandbox from its start, each wake's in one chunk and one write.
func (f *floor) stream(conn net.Conn) {
	req, err := http.ReadRequest(bufio.NewReader(conn))
	if err != nil {
		return
	}
	id, ok := strings.CutPrefix(req.URL.Path, "/v1/sandboxes/")
	id, ok2 := strings.CutSuffix(id, "/events/stream")
	fl := f.log(id)
	if !ok || !ok2 || fl == nil {
		io.WriteString(conn, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return
	}
	f.streams.Add(1)
	defer f.streams.Add(-1)
	buf := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n")
	buf = appendChunk(buf, [][]byte{[]byte("event: snapshot\ndata: {}\n\n")})
	if _, err := conn.Write(buf); err != nil {
		return
	}
	var cursor uint64
	for {
		frames, wake := fl.after(cursor)
		if len(frames) == 0 {
			<-wake
			continue
		}
		buf = appendChunk(buf[:0], frames)
		if _, err := conn.Write(buf); err != nil {
			return
		}
		cursor += uint64(len(frames))
		f.delivered.Add(int64(len(frames)))
		f.writes.Add(1)
	}
}

// appendChunk appends frames as one HTTP/1.1 chunk.
func appendChunk(b []byte, frames [][]byte) []byte {
	n := 0
	for _, fr := range frames {
		n += len(fr)
	}
	b = strconv.AppendUint(b, uint64(n), 16)
	b = append(b, "\r\n"...)
	for _, fr := range frames {
		b = append(b, fr...)
	}
	return append(b, "\r\n"...)
}

// floorLoader appends to the floor's sandboxes as startLoader does to the
// server's: a goroutine per sandbox, their ticks spread over the period,
// each frame the server's for the same event.
type floorLoader struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	appended atomic.Int64
	lasts    []uint64
}

func startFloorLoader(ctx context.Context, ids []string, logs []*floorLog, rate float64, size int) *floorLoader {
	ctx, cancel := context.WithCancel(ctx)
	ld := &floorLoader{cancel: cancel, lasts: make([]uint64, len(logs))}
	if len(logs) == 0 || rate <= 0 {
		return ld
	}
	every := time.Duration(float64(time.Second) * float64(len(logs)) / rate)
	tickSpread(ctx, &ld.wg, len(logs), every, func(i int) bool {
		// This goroutine is the log's only writer: its next id is its
		// last plus one.
		id := ld.lasts[i] + 1
		ev := newEvent(size)
		data, _ := json.Marshal(ev.Data)
		env := sandbox.AppendEnvelope(nil, id, ev.Type, time.Now(), ids[i], "", data)
		logs[i].append(fmt.Appendf(nil, "id: %d\nevent: %s\ndata: %s\n\n", id, ev.Type, env))
		ld.lasts[i] = id
		ld.appended.Add(1)
		return true
	})
	return ld
}

func (ld *floorLoader) stop() (int64, []uint64) {
	ld.cancel()
	ld.wg.Wait()
	return ld.appended.Load(), ld.lasts
}
