package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// With several coordinators on one NATS store, a sandbox's workspace is on
// the disk of the node that runs its agent. The JSON calls that drive the
// agent are forwarded over NATS by the coordinator; the workspace routes
// answer byte streams (a file with its Range, an upload, an archive of
// gigabytes), which fit no NATS message. So a node that is asked for the
// workspace of a sandbox another node holds proxies the HTTP request to
// that node's API as it came (method, path, query, body, headers, the
// same bearer token: every node of a cluster serves with one token) and
// streams the answer back as it goes.

// ForwardedByHeader marks a request one node proxied to another, with the
// address the first one took it on. A request that carries it is never
// proxied again: if the sandbox moved meanwhile the client retries, and
// nodes never pass a request around in a loop.
const ForwardedByHeader = "Sparkles-Forwarded-By"

// proxyTransport carries proxied requests between nodes. It dials them
// directly (no proxy from the environment), gives up soon on a node that
// does not answer at all, and leaves the bodies as they are: no gzip of
// its own, which would drop Content-Length and break Range.
var proxyTransport = &http.Transport{
	DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	DisableCompression:    true,
	MaxIdleConnsPerHost:   16,
	IdleConnTimeout:       90 * time.Second,
	TLSHandshakeTimeout:   10 * time.Second,
	ExpectContinueTimeout: time.Second,
}

// atHolder runs h where the sandbox's workspace is: here, or proxied to
// the node that holds the sandbox.
func (s *Server) atHolder(h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) error {
		base, here, err := s.b.Holder(r.Context(), ps.ByName("id"))
		if err != nil {
			return err
		}
		if here {
			return h(w, r, ps)
		}
		if by := r.Header.Get(ForwardedByHeader); by != "" {
			s.log.Warn("cluster: a proxied request reached a node that does not hold the sandbox", "request_id", requestID(w),
				"sandbox_id", ps.ByName("id"), "forwarded_by", by, "holder", base)
			return sandbox.Errorf(sandbox.EUnavailable, "the sandbox moved while the request was forwarded; retry")
		}
		target, err := url.Parse(base)
		if err != nil {
			return err // Holder checked it: a programming error
		}
		s.proxy(target, requestID(w)).ServeHTTP(w, r)
		return nil
	}
}

// errTokenRefused is a holder that refused the token this node accepted.
var errTokenRefused = errors.New("the node refused the token this node accepted")

// proxy is a reverse proxy of request rid to the node at target.
func (s *Server) proxy(target *url.URL, rid string) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
			h := pr.Out.Header
			by := "sparkles"
			if a, ok := pr.In.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
				by = a.String()
			}
			h.Set(ForwardedByHeader, by)
			// One request id in the logs of both nodes.
			if rid != "" {
				h.Set("X-Request-Id", rid)
			}
			// CORS was this node's to answer; the holder's would repeat
			// its headers, which browsers refuse.
			h.Del("Origin")
		},
		Transport: proxyTransport,
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode == http.StatusUnauthorized {
				resp.Body.Close()
				return errTokenRefused
			}
			// This node set it already, with the same value.
			resp.Header.Del("X-Request-Id")
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.proxyFailed(w, r, target, err)
		},
	}
}

// proxyFailed answers a proxied request whose holder gave no answer.
func (s *Server) proxyFailed(w http.ResponseWriter, r *http.Request, target *url.URL, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client left; nobody reads an answer
	}
	if errors.Is(err, errTokenRefused) {
		s.log.Error("cluster: the node holding the sandbox refused this server's token; every node must serve with the same --token",
			"request_id", requestID(w), "holder", target.String(), "path", r.URL.Path)
		s.writeError(w, r, sandbox.Errorf(sandbox.EUnavailable,
			"the node running this sandbox does not accept this server's token; every node of a cluster must serve with the same --token"))
		return
	}
	s.log.Warn("cluster: the node holding the sandbox does not answer", "request_id", requestID(w),
		"holder", target.String(), "path", r.URL.Path, "err", err)
	s.writeError(w, r, sandbox.Errorf(sandbox.EUnavailable,
		"the node running this sandbox does not answer; try again shortly"))
}
