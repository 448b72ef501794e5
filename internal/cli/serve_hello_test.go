package cli

import (
	"bytes"
	"net"
	"testing"
)

func TestWriteGreeting(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", "/home/me/.data")
	def := defaultDataDir()
	for _, tt := range []struct {
		name     string
		addr     string
		dataDir  string
		fromFile bool
		want     string
	}{
		{"Defaults", "127.0.0.1:7410", def, true,
			"\nSign in to the console: http://127.0.0.1:7410/#token=spk_x\n" +
				"Then try, in another terminal: sparkles prompt \"hello, please write notes.txt\"\n\n"},
		{"OtherPortAndDir", "127.0.0.1:7491", "/tmp/my data", true,
			"\nSign in to the console: http://127.0.0.1:7491/#token=spk_x\n" +
				"Then try, in another terminal: sparkles prompt --url http://127.0.0.1:7491 --data-dir \"/tmp/my data\" \"hello, please write notes.txt\"\n\n"},
		{"GivenToken", "0.0.0.0:7410", def, false,
			"\nSign in to the console: http://127.0.0.1:7410/#token=spk_x\n" +
				"Then try, in another terminal: sparkles prompt --token spk_x \"hello, please write notes.txt\"\n\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr, err := net.ResolveTCPAddr("tcp", tt.addr)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			writeGreeting(&b, addr, tt.dataDir, "spk_x", tt.fromFile)
			if got := b.String(); got != tt.want {
				t.Fatalf("greeting:\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"plain":        "plain",
		"/tmp/a b":     `"/tmp/a b"`,
		"it's $HOME":   `'it'\''s $HOME'`,
		"":             `""`,
		"spk_a-b.c/d=": "spk_a-b.c/d=",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
