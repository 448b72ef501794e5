// The fuzz runs of .ci/run build this package with -tags sparkles_fuzz,
// which leaves this file out: the OpenAPI validator it imports is large, and
// fuzzing instruments every package it builds (minutes on two cores). The
// test run builds it as usual.

//go:build !sparkles_fuzz

package server

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/internal/apitest"
)

// awaitedRoutes are operations the document may hold ahead of the router
// while they are being built (none now): every other one is checked both
// ways.
var awaitedRoutes []string

// docRoute is an operation of the document and who may call it.
type docRoute struct {
	op      string   // "GET /v1/sandboxes/{id}"
	schemes []string // the security schemes that admit a caller, sorted
}

// routerRoute is a route of the router and who may call it.
type routerRoute struct {
	op     string
	access string // "server", "read" or "open"
}

// openAPIPath writes an httprouter path the way the document does.
func openAPIPath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		if len(s) > 1 && (s[0] == ':' || s[0] == '*') {
			parts[i] = "{" + s[1:] + "}"
		}
	}
	return strings.Join(parts, "/")
}

// documentRoutes reads the operations of the document and their security.
func documentRoutes(t *testing.T, spec *apitest.Spec) []docRoute {
	t.Helper()
	raw := spec.Raw()
	var out []docRoute
	for _, op := range spec.Operations() {
		method, path, _ := strings.Cut(op, " ")
		sec, ok := apitest.Lookup(raw, "paths", path, strings.ToLower(method), "security").([]any)
		if !ok {
			sec, _ = raw["security"].([]any)
		}
		var schemes []string
		for _, req := range sec {
			for name := range req.(map[string]any) {
				schemes = append(schemes, name)
			}
		}
		slices.Sort(schemes)
		out = append(out, docRoute{op: op, schemes: schemes})
	}
	return out
}

// routesOf lists every route of s's router: the /v1 routes as registered,
// and the routes registered on the router directly, found in the package's
// source, so that a route added either way is seen.
func routesOf(t *testing.T, s *Server) []routerRoute {
	t.Helper()
	var out []routerRoute
	for _, r := range s.routes {
		access := "server"
		if r.access == accessRead {
			access = "read"
		}
		out = append(out, routerRoute{op: r.method + " " + openAPIPath(r.path), access: access})
	}
	for _, op := range directRoutes(t) {
		out = append(out, routerRoute{op: op, access: "open"})
	}
	return out
}

// directRoutes finds the calls that register a route on an httprouter
// with a literal path (rt.GET("/healthz", …), rt.Handle("GET", "/x", …))
// in the package's non-test files.
func directRoutes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	methods := map[string]string{"GET": "GET", "HEAD": "HEAD", "POST": "POST", "PUT": "PUT", "PATCH": "PATCH", "DELETE": "DELETE", "OPTIONS": "OPTIONS"}
	literal := func(e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind == token.STRING {
				s, err := strconv.Unquote(e.Value)
				return s, err == nil
			}
		case *ast.SelectorExpr: // http.MethodGet
			if x, ok := e.X.(*ast.Ident); ok && x.Name == "http" {
				if m, ok := strings.CutPrefix(e.Sel.Name, "Method"); ok {
					return strings.ToUpper(m), true
				}
			}
		}
		return "", false
	}
	var out []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			var method, path string
			switch name := sel.Sel.Name; {
			case methods[name] != "" && len(call.Args) == 2:
				method = methods[name]
				path, ok = literal(call.Args[0])
			case (name == "Handle" || name == "Handler" || name == "HandlerFunc") && len(call.Args) == 3:
				if method, ok = literal(call.Args[0]); ok {
					path, ok = literal(call.Args[1])
				}
			default:
				return true
			}
			if ok && strings.HasPrefix(path, "/") {
				out = append(out, method+" "+openAPIPath(path))
			}
			return true
		})
	}
	return out
}

// routeProblems compares the router with the document: every route must
// be an operation with the same security, and every operation a route the
// router answers (lookup), unless it is awaited.
func routeProblems(doc []docRoute, routes []routerRoute, lookup func(method, path string) bool, awaited []string) []string {
	var problems []string
	byOp := map[string]docRoute{}
	for _, d := range doc {
		byOp[d.op] = d
	}
	want := map[string][]string{"server": {"serverToken"}, "read": {"serverToken", "streamToken"}, "open": nil}
	routed := map[string]bool{}
	for _, r := range routes {
		routed[r.op] = true
		d, ok := byOp[r.op]
		if !ok {
			problems = append(problems, "the router answers "+r.op+"; the document has no such operation")
			continue
		}
		if !slices.Equal(d.schemes, want[r.access]) {
			problems = append(problems, r.op+": the document admits "+strings.Join(d.schemes, ", ")+"; the router admits "+r.access+" callers")
		}
	}
	for _, d := range doc {
		if routed[d.op] || slices.Contains(awaited, d.op) {
			continue
		}
		method, path, _ := strings.Cut(d.op, " ")
		sample := strings.NewReplacer("{", "", "}", "").Replace(path)
		if !lookup(method, sample) {
			problems = append(problems, "the document has "+d.op+"; the router does not answer it")
		}
	}
	return problems
}

// newRoutedServer is a Server with every optional route switched on.
func newRoutedServer() *Server {
	return New(Config{Token: testToken, Metrics: http.NotFoundHandler(), Ready: func() error { return nil }, Webhooks: newFakeWebhooks()})
}

func TestOpenAPIRoutes(t *testing.T) {
	spec, err := apitest.Load(openAPIDocument)
	if err != nil {
		t.Fatal(err)
	}
	s := newRoutedServer()
	lookup := func(method, path string) bool {
		h, _, _ := s.router.Lookup(method, path)
		return h != nil
	}
	doc := documentRoutes(t, spec)
	routes := routesOf(t, s)

	t.Run("OK", func(t *testing.T) {
		for _, p := range routeProblems(doc, routes, lookup, awaitedRoutes) {
			t.Error(p)
		}
		// The scan of the source found the routes outside /v1.
		for _, op := range []string{"GET /healthz", "GET /readyz"} {
			if !slices.ContainsFunc(routes, func(r routerRoute) bool { return r.op == op }) {
				t.Errorf("the scan of the router's source did not find %s", op)
			}
		}
	})

	// The comparison fails in each direction: a route the document lacks,
	// an operation the router lacks, and a route whose callers differ.
	t.Run("ErrUndocumentedRoute", func(t *testing.T) {
		extra := append(slices.Clone(routes), routerRoute{op: "POST /v1/sandboxes/{id}/pause", access: "server"})
		if p := routeProblems(doc, extra, lookup, awaitedRoutes); len(p) != 1 || !strings.Contains(p[0], "/pause") {
			t.Fatalf("problems = %q, want one about the /pause route", p)
		}
	})
	t.Run("ErrUnroutedOperation", func(t *testing.T) {
		less := slices.DeleteFunc(slices.Clone(routes), func(r routerRoute) bool { return r.op == "GET /v1/sandboxes/{id}/turns/{turn_id}" })
		none := func(method, path string) bool { return lookup(method, path) && !strings.Contains(path, "/turns/") }
		if p := routeProblems(doc, less, none, awaitedRoutes); len(p) == 0 {
			t.Fatal("an operation the router does not answer passed")
		}
	})
	t.Run("ErrSecurity", func(t *testing.T) {
		wrong := slices.Clone(routes)
		for i := range wrong {
			if wrong[i].op == "POST /v1/sandboxes" {
				wrong[i].access = "read"
			}
		}
		if p := routeProblems(doc, wrong, lookup, awaitedRoutes); len(p) != 1 || !strings.Contains(p[0], "POST /v1/sandboxes") {
			t.Fatalf("problems = %q, want one about POST /v1/sandboxes", p)
		}
	})
}

// TestOpenAPIServed checks that GET /v1/openapi.json answers the document
// in the source tree, to the server token only.
func TestOpenAPIServed(t *testing.T) {
	s := newRoutedServer()
	file, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, token string
		status      int
	}{
		{"OK", testToken, http.StatusOK},
		{"ErrNoToken", "", http.StatusUnauthorized},
		{"ErrStreamToken", StreamToken(testToken, "c_01jx4d8m2q7r0v5b3n6k9p1w2z"), http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/v1/openapi.json", nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			w := httptest.NewRecorder()
			s.ServeHTTP(w, req)
			if got, want := w.Code, tc.status; got != want {
				t.Fatalf("status %d, want %d: %s", got, want, w.Body)
			}
			if got, want := w.Header().Get("Content-Type"), "application/json"; got != want {
				t.Fatalf("Content-Type %q, want %q", got, want)
			}
			if tc.status == http.StatusOK && w.Body.String() != string(file) {
				t.Fatal("the served document is not server/openapi.json")
			}
		})
	}
	if got := OpenAPI(); string(got) != string(file) {
		t.Fatal("OpenAPI() is not server/openapi.json")
	}
}
