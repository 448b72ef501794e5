package webhook

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// ClientOptions bound the HTTP client of deliveries.
type ClientOptions struct {
	// AllowPrivate lets deliveries reach loopback, link-local and private
	// addresses (local development and tests).
	AllowPrivate bool
	// ConnectTimeout bounds the TCP connect and the TLS handshake
	// (default 10 s); RequestTimeout the whole request, the response's
	// bounded read included (default 30 s).
	ConnectTimeout, RequestTimeout time.Duration
	// Resolver resolves endpoints' names when a connection is made; nil
	// is the system's.
	Resolver *net.Resolver
}

// ErrPrivateAddress refuses a connection to an address a receiver on the
// public internet never has.
var ErrPrivateAddress = errors.New("the address is loopback, link-local or private")

// sharedSpace is 100.64.0.0/10 (RFC 6598), carrier-grade NAT, which
// netip does not count as private.
var sharedSpace = netip.MustParsePrefix("100.64.0.0/10")

// refused reports whether deliveries may not connect to addr.
func refused(addr netip.Addr) bool {
	addr = addr.Unmap()
	return addr.IsLoopback() || addr.IsLinkLocalUnicast() || addr.IsLinkLocalMulticast() ||
		addr.IsInterfaceLocalMulticast() || addr.IsMulticast() || addr.IsPrivate() ||
		addr.IsUnspecified() || sharedSpace.Contains(addr)
}

// NewClient returns the client deliveries use. The address is checked
// when the connection is made, after resolution, so a name that resolves
// to a public address at registration and to a private one later (DNS
// rebinding) is refused too. No proxy is used, since one would make the
// check moot, and redirects are not followed: a 3xx is a failed delivery.
func NewClient(o ClientOptions) *http.Client {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 30 * time.Second
	}
	d := &net.Dialer{Timeout: o.ConnectTimeout, Resolver: o.Resolver}
	if !o.AllowPrivate {
		d.Control = func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("webhook: connect to %s: %w", address, err)
			}
			if refused(ap.Addr()) {
				return fmt.Errorf("webhook: connect to %s: %w", address, ErrPrivateAddress)
			}
			return nil
		}
	}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		TLSHandshakeTimeout:   o.ConnectTimeout,
		ResponseHeaderTimeout: o.RequestTimeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   o.RequestTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}
