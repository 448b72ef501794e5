package e2e

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/apitest"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// checkCoverage fails when an operation, an event type or an error status
// went unexercised, so the test cannot quietly stop covering one.
func checkCoverage(t *testing.T, r *apiRecorder) {
	t.Helper()
	ops := r.spec.Operations()
	seen := map[string]map[int]bool{}
	for _, ex := range r.exchanges {
		op := operationOf(ops, ex.Method, pathOf(ex.URL))
		if seen[op] == nil {
			seen[op] = map[int]bool{}
		}
		seen[op][ex.Status] = true
	}
	for _, op := range ops {
		ok := false
		for status := range seen[op] {
			ok = ok || status < 300
		}
		if !ok && !r.unrouted[op] {
			t.Errorf("no successful answer of %s was validated", op)
		}
	}
	statuses := map[int]bool{}
	for _, m := range seen {
		for s := range m {
			statuses[s] = true
		}
	}
	for _, s := range []int{400, 401, 403, 404, 409, 410, 413, 415, 500, 503} {
		if !statuses[s] {
			t.Errorf("no %d answer was validated", s)
		}
	}
	streamed := map[string]bool{}
	for _, f := range r.frames {
		streamed[f.Event] = true
	}
	for _, typ := range []sandbox.Type{sandbox.TypeSnapshot, sandbox.TypeSandboxStatus} {
		if !streamed[string(typ)] {
			t.Errorf("no %s frame was validated", typ)
		}
	}
	for _, typ := range sandbox.DurableTypes {
		if !streamed[string(typ)] {
			t.Errorf("no %s frame was validated", typ)
		}
		if !r.pageTypes[string(typ)] {
			t.Errorf("no events page with a %s event was validated", typ)
		}
	}
	var lines []string
	for op, m := range seen {
		var codes []string
		for s := range m {
			codes = append(codes, fmt.Sprint(s))
		}
		slices.Sort(codes)
		lines = append(lines, op+": "+strings.Join(codes, " "))
	}
	slices.Sort(lines)
	t.Logf("validated %d answers, %d frames:\n%s", len(r.exchanges), len(r.frames), strings.Join(lines, "\n"))
}

// operationOf names the operation of the document that answers a request.
func operationOf(ops []string, method, path string) string {
	for _, op := range ops {
		m, tmpl, _ := strings.Cut(op, " ")
		re := "^" + regexp.MustCompile(`\\\{[^}]+\\\}`).ReplaceAllString(regexp.QuoteMeta(tmpl), `[^/]+`) + "$"
		if m == method && regexp.MustCompile(re).MatchString(path) {
			return op
		}
	}
	return method + " " + path
}

// failsOn reports whether a document fails any recorded answer or frame.
func (r *apiRecorder) failsOn(spec *apitest.Spec) bool {
	for _, ex := range r.exchanges {
		if spec.Check(ex) != nil {
			return true
		}
	}
	for _, f := range r.frames {
		if spec.CheckFrame(f) != nil {
			return true
		}
	}
	for _, c := range r.schemas {
		if spec.CheckSchema(c.schema, c.body) != nil {
			return true
		}
	}
	return false
}

// checkBrokenDocuments breaks the document one part at a time; each broken
// document must fail some recorded answer, frame or body. Each mutation
// proves that the part it breaks is held to the server's real output.
func checkBrokenDocuments(t *testing.T, r *apiRecorder, file []byte) {
	t.Helper()
	schemas := func(d map[string]any) map[string]any {
		return apitest.Lookup(d, "components", "schemas").(map[string]any)
	}
	schema := func(d map[string]any, name string) map[string]any { return schemas(d)[name].(map[string]any) }
	props := func(d map[string]any, name string) map[string]any {
		return schema(d, name)["properties"].(map[string]any)
	}
	requireField := func(name string) func(map[string]any) {
		return func(d map[string]any) {
			s := schema(d, name)
			s["required"] = append(s["required"].([]any), "undocumented")
			props(d, name)["undocumented"] = map[string]any{"type": "string"}
		}
	}
	dropEnum := func(name, prop, value string) func(map[string]any) {
		return func(d map[string]any) {
			p := props(d, name)[prop].(map[string]any)
			p["enum"] = slices.DeleteFunc(p["enum"].([]any), func(v any) bool { return v == value })
		}
	}
	dropProp := func(name, prop string) func(map[string]any) {
		return func(d map[string]any) {
			delete(props(d, name), prop)
			s := schema(d, name)
			s["required"] = slices.DeleteFunc(s["required"].([]any), func(v any) bool { return v == prop })
		}
	}
	mutations := map[string]func(map[string]any){
		// Each event type's own data schema is what its events are held to.
		"snapshot data":           requireField("Snapshot"),
		"sandbox.status data":     requireField("SandboxStatus"),
		"turn.started data":       requireField("TurnStarted"),
		"turn.completed data":     requireField("TurnCompleted"),
		"message.updated data":    requireField("MessageUpdated"),
		"message.completed data":  requireField("MessageCompleted"),
		"tool.updated data":       requireField("ToolUpdated"),
		"approval.requested data": requireField("ApprovalRequested"),
		"approval.resolved data":  requireField("ApprovalResolved"),
		"sandbox.error data":      requireField("SandboxError"),
		// A type missing from the oneOf.
		"no message.completed variant": func(d map[string]any) {
			for _, name := range []string{"Event", "DurableEvent"} {
				s := schema(d, name)
				s["oneOf"] = slices.DeleteFunc(s["oneOf"].([]any), func(v any) bool {
					return v.(map[string]any)["$ref"] == "#/components/schemas/MessageCompletedEvent"
				})
				delete(s["discriminator"].(map[string]any)["mapping"].(map[string]any), "message.completed")
			}
		},
		// Values the server sends.
		"no canceled turns":      dropEnum("TurnCompleted", "status", "canceled"),
		"no turn_canceled":       dropEnum("ApprovalResolved", "reason", "turn_canceled"),
		"no agent_start_failed":  func(d map[string]any) { dropFrom(schema(d, "SandboxErrorCode"), "agent_start_failed") },
		"no deleted status":      func(d map[string]any) { dropFrom(schema(d, "SandboxStatusValue"), "deleted") },
		"two-digit milliseconds": func(d map[string]any) { schema(d, "Timestamp")["pattern"] = `^[0-9-]{10}T[0-9:]{8}\.[0-9]{2}Z$` },
		"transient ids": func(d map[string]any) {
			props(d, "SnapshotEvent")["id"] = map[string]any{"$ref": "#/components/schemas/EventID"}
		},
		// Fields of the resources and of the error bodies.
		"no status_detail": dropProp("Sandbox", "status_detail"),
		"no stream_token":  dropProp("CreatedSandbox", "stream_token"),
		"no watermarks in 410": func(d map[string]any) {
			e := props(d, "CursorError")["error"].(map[string]any)
			delete(e["properties"].(map[string]any), "pruned_through")
			e["required"] = slices.DeleteFunc(e["required"].([]any), func(v any) bool { return v == "pruned_through" })
		},
		"no page cursor": dropProp("EventPage", "next_since"),
		// Statuses and media types.
		"no 410 on the events page": func(d map[string]any) {
			delete(apitest.Lookup(d, "paths", "/v1/sandboxes/{id}/events", "get", "responses").(map[string]any), "410")
		},
		"no 409 on decisions": func(d map[string]any) {
			delete(apitest.Lookup(d, "paths", "/v1/sandboxes/{id}/approvals/{approval_id}", "post", "responses").(map[string]any), "409")
		},
		"stream answers JSON": func(d map[string]any) {
			c := apitest.Lookup(d, "paths", apitest.StreamPath, "get", "responses", "200", "content").(map[string]any)
			c["application/json"] = map[string]any{"schema": map[string]any{"type": "object"}}
			delete(c, "text/event-stream")
			c["application/json"].(map[string]any)[apitest.FrameExtension] = "#/components/schemas/Event"
		},
		"stream buffered": func(d map[string]any) {
			apitest.Lookup(d, "paths", apitest.StreamPath, "get", "responses", "200", "headers", "X-Accel-Buffering", "schema").(map[string]any)["const"] = "yes"
		},
		// Requests: what the server refuses, the document must refuse.
		"open turn body":   func(d map[string]any) { schema(d, "TurnRequest")["additionalProperties"] = true },
		"open create body": func(d map[string]any) { schema(d, "CreateSandboxRequest")["additionalProperties"] = true },
		"no security":      func(d map[string]any) { d["security"] = []any{} },
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range mutations {
			if !yield(k) {
				return
			}
		}
	})
	for _, name := range names {
		broken, err := apitest.Mutated(file, mutations[name])
		if err == nil {
			broken, err = apitest.Closed(broken)
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		spec, err := apitest.Load(broken)
		if err != nil {
			t.Errorf("broken document %q does not load: %v", name, err)
			continue
		}
		if !r.failsOn(spec) {
			t.Errorf("broken document %q passes every recorded answer: that part of the document is not checked", name)
		}
	}
}

// dropFrom removes value from a schema's enum.
func dropFrom(s map[string]any, value string) {
	s["enum"] = slices.DeleteFunc(s["enum"].([]any), func(v any) bool { return v == value })
}
