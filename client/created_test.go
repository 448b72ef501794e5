package client_test

import (
	"encoding/json"
	"testing"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// A backend that passes the create answer on as JSON keeps the token: the
// embedded Sandbox marshals itself, which would otherwise drop it.
func TestCreatedSandboxJSON(t *testing.T) {
	in := client.CreatedSandbox{Sandbox: sandbox.Sandbox{ID: "c_x", Object: "sandbox"}, StreamToken: "st_c_x.mac"}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out client.CreatedSandbox
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.ID != in.ID || out.StreamToken != in.StreamToken {
		t.Fatalf("round trip of %s = %+v", b, out)
	}
}
