package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/internal/agent"
	"github.com/sparkles-dev/sparkles/sandbox"
	"github.com/sparkles-dev/sparkles/sparklestest"
)

// pngData is a 68-byte PNG (one transparent pixel) in base64.
const pngData = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="

// attachRun is a sandbox of the demo agent and a stream of its log.
type attachRun struct {
	t      *testing.T
	ctx    context.Context
	c      *client.Client
	id     string
	stream *client.Stream
}

func newAttachRun(t *testing.T, srv *sparklestest.Server, env map[string]string) *attachRun {
	return newAttachRunOf(t, srv, client.CreateSandboxRequest{Env: env})
}

func newAttachRunOf(t *testing.T, srv *sparklestest.Server, req client.CreateSandboxRequest) *attachRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	sb, err := srv.Client.CreateSandbox(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	st := srv.Client.Stream(ctx, sb.ID, client.StreamOptions{Since: client.Since(0)})
	t.Cleanup(func() { st.Close() })
	return &attachRun{t: t, ctx: ctx, c: srv.Client, id: sb.ID, stream: st}
}

// completed reads the stream up to the turn.completed of turnID.
func (r *attachRun) completed(turnID string) sandbox.TurnCompleted {
	r.t.Helper()
	for {
		m, err := r.stream.Next(r.ctx)
		if err != nil {
			r.t.Fatalf("stream: %v", err)
		}
		if m.Kind == client.KindEvent && m.Event.Type == sandbox.TypeTurnCompleted && m.Event.TurnID == turnID {
			return *m.Event.Data.(*sandbox.TurnCompleted)
		}
	}
}

// turn runs input to its end and answers its turn.completed.
func (r *attachRun) turn(input []sandbox.InputBlock) (sandbox.Turn, sandbox.TurnCompleted) {
	r.t.Helper()
	tn, err := r.c.StartTurnInput(r.ctx, r.id, input, false)
	if err != nil {
		r.t.Fatal(err)
	}
	return tn, r.completed(tn.ID)
}

// log is every event of the sandbox as the server sent it.
func (r *attachRun) log() ([]sandbox.Event, string) {
	r.t.Helper()
	p, err := r.c.Events(r.ctx, r.id, 0, 1000)
	if err != nil {
		r.t.Fatal(err)
	}
	var raw bytes.Buffer
	for _, e := range p.Raw {
		raw.Write(e)
		raw.WriteByte('\n')
	}
	return p.Events, raw.String()
}

// TestTurnAttachments: through the server a user runs, with the demo
// agent: a turn of text, an image and a file of the workspace reaches the
// agent as text, image and embedded resource (its reply describes them);
// turn.started and the turn resource record the image by type and size
// and the file by its relative path, and no event holds the image's data
// or the workspace's host path.
func TestTurnAttachments(t *testing.T) {
	srv := sparklestest.Start(t)
	const canary = "canary-5e0c8a7d13"
	r := newAttachRunOf(t, srv, client.CreateSandboxRequest{Secrets: map[string]string{"CANARY": canary}})
	if _, err := r.c.WriteFile(r.ctx, r.id, "docs/notes.txt", strings.NewReader("hello notes\n"), client.WriteFileOptions{}); err != nil {
		t.Fatal(err)
	}
	tn, done := r.turn([]sandbox.InputBlock{
		{Type: "text", Text: "describe these " + canary},
		{Type: "image", MediaType: "image/png", Data: pngData},
		{Type: "file", Path: "docs/notes.txt"},
	})
	if done.Status != "succeeded" {
		t.Fatalf("turn.completed = %+v, want succeeded", done)
	}
	want := []sandbox.Input{
		{Type: "text", Text: "describe these [REDACTED]"},
		{Type: "image", MediaType: "image/png", Bytes: 68},
		{Type: "file", Path: "docs/notes.txt"},
	}
	if got, _ := json.Marshal(tn.Input); string(got) != string(mustJSON(json.Marshal(want))) {
		t.Errorf("turn input = %s, want %s", got, mustJSON(json.Marshal(want)))
	}
	evs, raw := r.log()
	var started *sandbox.TurnStarted
	for _, e := range evs {
		if e.Type == sandbox.TypeTurnStarted && e.TurnID == tn.ID {
			started = e.Data.(*sandbox.TurnStarted)
		}
	}
	if started == nil {
		t.Fatal("no turn.started")
	}
	if got, want := string(mustJSON(json.Marshal(started.Input))), string(mustJSON(json.Marshal(want))); got != want {
		t.Errorf("turn.started input = %s, want %s", got, want)
	}
	for _, s := range []string{"image image/png 68 bytes", "resource file://docs/notes.txt 12 bytes"} {
		if !strings.Contains(raw, s) {
			t.Errorf("the log has no %q: the agent's reply should describe the attachment", s)
		}
	}
	for _, s := range []string{pngData[:40], srv.DataDir, canary} {
		if strings.Contains(raw, s) {
			t.Errorf("the log holds %q", s)
		}
	}
	got, err := r.c.GetTurn(r.ctx, r.id, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(mustJSON(json.Marshal(got))); strings.Contains(s, pngData[:40]) {
		t.Errorf("the turn resource holds the image data: %s", s)
	}
}

// TestTurnAttachmentsQueued: a turn of blocks queued behind a running one
// keeps its blocks: turn.queued records them curated, and once it runs
// the agent gets the image.
func TestTurnAttachmentsQueued(t *testing.T) {
	srv := sparklestest.Start(t)
	r := newAttachRun(t, srv, nil)
	hang, err := r.c.StartTurn(r.ctx, r.id, "hang")
	if err != nil {
		t.Fatal(err)
	}
	q, err := r.c.StartTurnInput(r.ctx, r.id, []sandbox.InputBlock{{Type: "text", Text: "and this"}, {Type: "image", MediaType: "image/gif", Data: pngData}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if q.Status != sandbox.TurnQueued || len(q.Input) != 2 || q.Input[1] != (sandbox.Input{Type: "image", MediaType: "image/gif", Bytes: 68}) {
		t.Fatalf("queued turn = %+v", q)
	}
	if _, err := r.c.CancelTurn(r.ctx, r.id, hang.ID); err != nil {
		t.Fatal(err)
	}
	if done := r.completed(q.ID); done.Status != "succeeded" {
		t.Fatalf("queued turn completed %+v", done)
	}
	_, raw := r.log()
	if !strings.Contains(raw, "image image/gif 68 bytes") || strings.Contains(raw, pngData[:40]) {
		t.Errorf("the log should tell of the image by the reply and never hold its data")
	}
	if !strings.Contains(raw, `"type":"turn.queued"`) || !strings.Contains(raw, `{"type":"image","media_type":"image/gif","bytes":68}`) {
		t.Errorf("turn.queued does not record the image curated")
	}
}

// TestTurnAttachmentsRefused: blocks that cannot be sent are answered 400
// invalid_request naming what is wrong, and no turn starts.
func TestTurnAttachmentsRefused(t *testing.T) {
	srv := sparklestest.Start(t)
	r := newAttachRun(t, srv, nil)
	outside := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(outside, []byte("not the workspace's"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The sandbox's agent makes the workspace as it boots, which a create
	// begins and does not wait for: the link needs it now.
	work := filepath.Join(srv.DataDir, "sandboxes", r.id, "work")
	if err := os.MkdirAll(work, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(work, "link.txt")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		block sandbox.InputBlock
		want  string
	}{
		{"BadBase64", sandbox.InputBlock{Type: "image", MediaType: "image/png", Data: "not base64!"}, "base64"},
		{"MediaType", sandbox.InputBlock{Type: "image", MediaType: "image/tiff", Data: pngData}, `"image/tiff"`},
		{"Escape", sandbox.InputBlock{Type: "file", Path: "../../etc/passwd"}, "outside the workspace"},
		{"Missing", sandbox.InputBlock{Type: "file", Path: "nope.txt"}, "nope.txt"},
		{"SymlinkOut", sandbox.InputBlock{Type: "file", Path: "link.txt"}, "outside the workspace"},
		{"Type", sandbox.InputBlock{Type: "audio"}, `"audio"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.c.StartTurnInput(r.ctx, r.id, []sandbox.InputBlock{{Type: "text", Text: "look"}, tc.block}, false)
			var ae *client.Error
			if !errors.As(err, &ae) || ae.Status != 400 || ae.Type != sandbox.EInvalidRequest || !strings.Contains(ae.Message, tc.want) {
				t.Fatalf("err = %v, want 400 invalid_request naming %s", err, tc.want)
			}
		})
	}
	t.Run("TooLarge", func(t *testing.T) {
		big := base64.StdEncoding.EncodeToString(make([]byte, sandbox.DefaultTurnImageMax+1))
		_, err := r.c.StartTurnInput(r.ctx, r.id, []sandbox.InputBlock{{Type: "image", MediaType: "image/png", Data: big}}, false)
		var ae *client.Error
		if !errors.As(err, &ae) || ae.Status != 413 || !strings.Contains(ae.Message, "--turn-image-max-size") {
			t.Fatalf("err = %v, want 413 naming --turn-image-max-size", err)
		}
	})
	sb, err := r.c.GetSandbox(r.ctx, r.id)
	if err != nil {
		t.Fatal(err)
	}
	if sb.CurrentTurn != nil {
		t.Fatalf("a refused turn started: %+v", sb.CurrentTurn)
	}
}

// TestTurnAttachmentsNotOffered: an agent whose promptCapabilities offer
// no images. Once it runs, an image is refused 400 naming the capability;
// a file reaches it as a resource_link. A turn with an image accepted
// before it booted fails with input_unsupported.
func TestTurnAttachmentsNotOffered(t *testing.T) {
	srv := sparklestest.Start(t)
	env := map[string]string{agent.DemoNoAttachmentsEnv: "1"}

	t.Run("Booting", func(t *testing.T) {
		// Sent at once after the create, the turn meets the agent booting
		// or booted: refused at once, or accepted and then failed.
		r := newAttachRun(t, srv, env)
		tn, err := r.c.StartTurnInput(r.ctx, r.id, []sandbox.InputBlock{{Type: "text", Text: "look"}, {Type: "image", MediaType: "image/png", Data: pngData}}, false)
		var ae *client.Error
		switch {
		case errors.As(err, &ae):
			if ae.Status != 400 || !strings.Contains(ae.Message, "promptCapabilities.image") {
				t.Fatalf("err = %v, want 400 naming promptCapabilities.image", err)
			}
		case err != nil:
			t.Fatal(err)
		default:
			done := r.completed(tn.ID)
			if done.Error == nil || done.Error.Code != sandbox.ErrInputUnsupported || !strings.Contains(done.Error.Message, "promptCapabilities.image") {
				t.Fatalf("turn.completed = %+v, want failed with %s naming promptCapabilities.image", done, sandbox.ErrInputUnsupported)
			}
		}
	})
	t.Run("Running", func(t *testing.T) {
		r := newAttachRun(t, srv, env)
		if _, err := r.c.WriteFile(r.ctx, r.id, "notes.txt", strings.NewReader("hello notes\n"), client.WriteFileOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, done := r.turn([]sandbox.InputBlock{{Type: "text", Text: "hello"}}); done.Status != "succeeded" {
			t.Fatalf("first turn: %+v", done)
		}
		_, err := r.c.StartTurnInput(r.ctx, r.id, []sandbox.InputBlock{{Type: "image", MediaType: "image/png", Data: pngData}}, false)
		var ae *client.Error
		if !errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(ae.Message, "does not accept images (promptCapabilities.image)") {
			t.Fatalf("err = %v, want 400 naming promptCapabilities.image", err)
		}
		if _, done := r.turn([]sandbox.InputBlock{{Type: "text", Text: "read it"}, {Type: "file", Path: "notes.txt"}}); done.Status != "succeeded" {
			t.Fatalf("file turn: %+v", done)
		}
		if _, raw := r.log(); !strings.Contains(raw, "resource_link file://notes.txt") {
			t.Errorf("the reply does not tell of a resource_link to notes.txt")
		}
	})
}

// TestCLIPromptAttachments: sparkles prompt --image and --file send the
// blocks; the demo agent's reply, printed, describes them.
func TestCLIPromptAttachments(t *testing.T) {
	srv := sparklestest.Start(t)
	env := cliEnv(t, serverEnv(srv)...)
	r := newAttachRun(t, srv, nil)
	if _, err := r.c.WriteFile(r.ctx, r.id, "notes.txt", strings.NewReader("hello notes\n"), client.WriteFileOptions{}); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(t.TempDir(), "dot.png")
	if err := os.WriteFile(img, mustJSON(base64.StdEncoding.DecodeString(pngData)), 0o644); err != nil {
		t.Fatal(err)
	}
	res := run(t, env, "prompt", "--sandbox", r.id, "--image", img, "--file", "notes.txt", "describe these")
	if res.code != 0 || !strings.Contains(res.stdout, "image image/png 68 bytes; resource file://notes.txt 12 bytes") {
		t.Fatalf("prompt with attachments:\n%s", res)
	}
	if res := run(t, env, "prompt", "--sandbox", r.id, "--image", "notes.txt", "look"); res.code != 64 || !strings.Contains(res.stderr, ".png") {
		t.Fatalf("--image of a file not an image:\n%s", res)
	}
}

func mustJSON[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
