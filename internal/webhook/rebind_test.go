package webhook_test

import (
	"context"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sparkles-dev/sparkles/internal/webhook"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// rebindName is the name the DNS server below answers.
const rebindName = "rebind.test."

// dnsServer answers A queries for rebindName with the address the test
// sets, AAAA queries for it with no record, and every other name with
// NXDOMAIN. It counts the A queries it answered with each address.
type dnsServer struct {
	conn net.PacketConn

	mu      sync.Mutex
	addr    netip.Addr
	answers map[netip.Addr]int
}

func newDNSServer(tb testing.TB, addr netip.Addr) *dnsServer {
	tb.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &dnsServer{conn: conn, addr: addr, answers: map[netip.Addr]int{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.serve(tb)
	}()
	tb.Cleanup(func() {
		_ = conn.Close()
		<-done
	})
	return s
}

// set makes later answers carry addr.
func (s *dnsServer) set(addr netip.Addr) {
	s.mu.Lock()
	s.addr = addr
	s.mu.Unlock()
}

// answered returns how many A answers carried addr.
func (s *dnsServer) answered(addr netip.Addr) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answers[addr]
}

// resolver resolves every name through s.
func (s *dnsServer) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", s.conn.LocalAddr().String())
	}}
}

func (s *dnsServer) serve(tb testing.TB) {
	buf := make([]byte, 512)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		resp, err := s.answer(buf[:n])
		if err != nil {
			tb.Errorf("dns server: %v", err)
			continue
		}
		_, _ = s.conn.WriteTo(resp, from)
	}
}

func (s *dnsServer) answer(req []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired,
		RecursionAvailable: true}
	ours := strings.EqualFold(q.Name.String(), rebindName)
	if !ours {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if ours && q.Type == dnsmessage.TypeA {
		s.mu.Lock()
		addr := s.addr
		s.answers[addr]++
		s.mu.Unlock()
		if err := b.StartAnswers(); err != nil {
			return nil, err
		}
		rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 0}
		if err := b.AResource(rr, dnsmessage.AResource{A: addr.As4()}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// publicAddr is what the name resolves to at registration: a documentation
// address (TEST-NET-3), which the check counts as public and which no
// connection is ever made to, since the answer changes before delivery.
var publicAddr = netip.MustParseAddr("203.0.113.7")

var loopback = netip.MustParseAddr("127.0.0.1")

// rebindLoop is a loop resolving names through dns, not started.
func rebindLoop(tb testing.TB, st webhook.Store, lg webhook.Log, dns *dnsServer, allowPrivate bool, attempts chan<- webhook.Attempt) *webhook.Loop {
	l := webhook.New(webhook.Config{Store: st, Log: lg, AllowPrivate: allowPrivate, Resolver: dns.resolver(),
		MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond, Interval: 10 * time.Millisecond,
		OnAttempt: func(a webhook.Attempt) {
			select {
			case attempts <- a:
			default:
			}
		}})
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

// rebindURL is the receiver's URL with its host replaced by rebindName.
func rebindURL(tb testing.TB, rcv *receiver) string {
	u, err := url.Parse(rcv.srv.URL)
	if err != nil {
		tb.Fatal(err)
	}
	return "http://" + strings.TrimSuffix(rebindName, ".") + ":" + u.Port() + "/"
}

// A name that resolves to a public address at registration and to
// loopback afterwards (DNS rebinding) is refused when the delivery
// connects: the attempt fails with the private-address error and the
// loopback receiver gets no request.
func TestRebind_RefusedAtConnect(t *testing.T) {
	dns := newDNSServer(t, publicAddr)
	rcv := newReceiver(t, "")
	attempts := make(chan webhook.Attempt, 64)
	st := openStore(t)
	sb := newSandbox(t, st)
	l := rebindLoop(t, st, st, dns, false, attempts)
	ctx := context.Background()

	created, err := l.CreateWebhook(ctx, sandbox.WebhookParams{URL: rebindURL(t, rcv)})
	if err != nil {
		t.Fatalf("registration while the name is public: %v", err)
	}
	if dns.answered(publicAddr) == 0 {
		t.Fatal("registration did not resolve the name through the resolver given")
	}
	dns.set(loopback)
	// While the name is loopback, registration refuses it too.
	if _, err := l.CreateWebhook(ctx, sandbox.WebhookParams{URL: rebindURL(t, rcv)}); !sandbox.IsType(err, sandbox.EInvalidRequest) || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("registration while the name is loopback: err = %v, want invalid_request naming 127.0.0.1", err)
	}
	before := dns.answered(loopback)

	l.Start()
	ids := appendEvents(t, st, sb, sandbox.TypeTurnCompleted)

	a := <-attempts
	if a.Endpoint != created.ID || a.EventID != ids[0] || a.OK() {
		t.Fatalf("attempt %+v, want a failed attempt of event %d to %s", a, ids[0], created.ID)
	}
	if !strings.Contains(a.Err, webhook.ErrPrivateAddress.Error()) || a.Status != 0 {
		t.Fatalf("attempt error %q (status %d), want the private-address error", a.Err, a.Status)
	}
	if dns.answered(loopback) == before {
		t.Fatal("the delivery did not resolve the name again when it connected")
	}
	rcv.mu.Lock()
	got := len(rcv.reqs)
	rcv.mu.Unlock()
	if got != 0 {
		t.Fatalf("the loopback receiver got %d requests", got)
	}
}

// With private addresses allowed, the same name, resolving to loopback,
// is delivered to, through the resolver given.
func TestRebind_AllowPrivateDelivers(t *testing.T) {
	dns := newDNSServer(t, loopback)
	rcv := newReceiver(t, "")
	attempts := make(chan webhook.Attempt, 64)
	st := openStore(t)
	sb := newSandbox(t, st)
	l := rebindLoop(t, st, st, dns, true, attempts)
	ctx := context.Background()

	created, err := l.CreateWebhook(ctx, sandbox.WebhookParams{URL: rebindURL(t, rcv)})
	if err != nil {
		t.Fatal(err)
	}
	rcv.mu.Lock()
	rcv.secret = created.Secret
	rcv.mu.Unlock()
	l.Start()
	ids := appendEvents(t, st, sb, sandbox.TypeTurnCompleted)

	if a := <-attempts; !a.OK() {
		t.Fatalf("attempt %+v failed: %s", a, a.Err)
	}
	got := rcv.waitAccepted(t, 1)
	if id := got[0].eventID(t); id != ids[0] {
		t.Fatalf("delivered event %d, want %d", id, ids[0])
	}
	if dns.answered(loopback) == 0 {
		t.Fatal("the delivery did not resolve the name through the resolver given")
	}
}
