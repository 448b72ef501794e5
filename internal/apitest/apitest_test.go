package apitest_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/apitest"
)

func readDoc(t *testing.T) []byte { return readDocB(t) }

func readDocB(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "server", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLoad(t *testing.T) {
	doc := readDoc(t)
	if _, err := apitest.Load(doc); err != nil {
		t.Fatal(err)
	}
	closed, err := apitest.Closed(doc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := apitest.Load(closed); err != nil {
		t.Fatal(err)
	}
}

// A broken document is an error of Load, not a validator that passes
// everything.
func TestLoadBroken(t *testing.T) {
	doc := readDoc(t)
	for name, f := range map[string]func(d map[string]any){
		"Version30": func(d map[string]any) { d["openapi"] = "3.0.3" },
		"DanglingRef": func(d map[string]any) {
			apitest.Lookup(d, "components", "schemas").(map[string]any)["Sandbox"] = map[string]any{"$ref": "#/components/schemas/Nope"}
		},
		"NotOpenAPI": func(d map[string]any) {
			apitest.Lookup(d, "paths", "/healthz", "get").(map[string]any)["responses"] = "none"
		},
		"NoFrameSchema": func(d map[string]any) {
			delete(apitest.Lookup(d, "paths", apitest.StreamPath, "get", "responses", "200", "content", "text/event-stream").(map[string]any), apitest.FrameExtension)
		},
	} {
		t.Run(name, func(t *testing.T) {
			bad, err := apitest.Mutated(doc, f)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := apitest.Load(bad); err == nil {
				t.Fatal("Load accepted a broken document")
			}
		})
	}
}
