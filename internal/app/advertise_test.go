package app

import (
	"net"
	"os"
	"testing"
)

// TestDefaultAdvertiseURL: the API URL a node records without
// --advertise-url is the address it listens on, or the host name where
// --addr is a wildcard, always with the port it listens on.
func TestDefaultAdvertiseURL(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr      string
		listening net.TCPAddr
		want      string
	}{
		{"127.0.0.1:0", net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4321}, "http://127.0.0.1:4321"},
		{"[::1]:0", net.TCPAddr{IP: net.IPv6loopback, Port: 4321}, "http://[::1]:4321"},
		{"localhost:7410", net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7410}, "http://localhost:7410"},
		{":7410", net.TCPAddr{IP: net.IPv6unspecified, Port: 7410}, "http://" + net.JoinHostPort(host, "7410")},
		{"0.0.0.0:0", net.TCPAddr{IP: net.IPv4zero, Port: 5555}, "http://" + net.JoinHostPort(host, "5555")},
	} {
		if got, err := defaultAdvertiseURL(tc.addr, &tc.listening); err != nil || got != tc.want {
			t.Errorf("defaultAdvertiseURL(%q, %s) = %q, %v, want %q", tc.addr, &tc.listening, got, err, tc.want)
		}
	}
}
