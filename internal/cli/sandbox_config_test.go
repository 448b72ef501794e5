package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sparkles-dev/sparkles/sandbox"
)

// TestSandboxConfigCommand: `sparkles sandbox config` shows the demo
// agent's mode, model and choices, switches the mode between turns, and
// refuses one the agent does not offer in one line naming its choices.
func TestSandboxConfigCommand(t *testing.T) {
	srv, id := startSandbox(t)
	runTurn(t, srv, id, "hello") // the agent has booted and announced its choices

	r := mustRun(t, srv.URL, "sandbox", "config", id)
	want := "mode    default\n" +
		"model   demo-small\n" +
		"modes   *default (Default), plan (Plan)\n" +
		"models  *demo-small (Demo Small), demo-large (Demo Large)\n"
	if r.out != want {
		t.Fatalf("sandbox config:\n%s\nwant:\n%s", r.out, want)
	}

	r = mustRun(t, srv.URL, "sandbox", "config", id, "--mode", "plan")
	if !strings.HasPrefix(r.out, "mode    plan\n") || !strings.Contains(r.out, "*plan (Plan)") {
		t.Fatalf("sandbox config --mode plan:\n%s", r.out)
	}
	got, err := srv.Client.GetSandbox(testCtx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Config == nil || got.Config.Mode != "plan" || got.Config.Model != "demo-small" {
		t.Fatalf("config after the switch = %+v", got.Config)
	}

	r = mustRun(t, srv.URL, "sandbox", "config", id, "--json")
	var cfg sandbox.AgentConfig
	if err := json.Unmarshal([]byte(r.out), &cfg); err != nil || cfg.Mode != "plan" || len(cfg.Modes) != 2 {
		t.Fatalf("sandbox config --json: %v\n%s", err, r.out)
	}

	// The switch is in the log, and `sparkles events` says what it is.
	r = mustRun(t, srv.URL, "events", id)
	if !strings.Contains(r.out, "sandbox.updated    mode plan · model demo-small\n") {
		t.Fatalf("events have no sandbox.updated line:\n%s", r.out)
	}

	t.Run("ErrUnknownMode", func(t *testing.T) {
		r, err := runCLI(t, srv.URL, "", "sandbox", "config", id, "--mode", "yolo")
		if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "yolo") || !strings.Contains(err.Error(), "plan") || r.out != "" {
			t.Fatalf("unknown mode: err %v, out %q", err, r.out)
		}
	})

	t.Run("ErrUsage", func(t *testing.T) {
		for _, args := range [][]string{
			{"sandbox", "config"},
			{"sandbox", "config", id, "other"},
			{"sandbox", "config", id, "--mode"},
		} {
			_, err := runCLI(t, srv.URL, "", args...)
			if _, usage := err.(usageError); !usage {
				t.Errorf("sparkles %s: err %v, want a usage error (exit 64)", strings.Join(args, " "), err)
			}
		}
	})

	t.Run("ErrNotFound", func(t *testing.T) {
		_, err := runCLI(t, srv.URL, "", "sandbox", "config", "sb_missing", "--mode", "plan")
		if err == nil || !strings.Contains(err.Error(), "sparkles sandbox list") {
			t.Fatalf("missing sandbox: %v", err)
		}
	})
}

func TestConfigLine(t *testing.T) {
	d := &sandbox.SandboxUpdated{Config: sandbox.AgentConfig{Mode: "acceptEdits"}}
	if got, want := summary(sandbox.Event{Type: sandbox.TypeSandboxUpdated, Data: d}, 200), "mode acceptEdits · model -"; got != want {
		t.Fatalf("gist %q, want %q", got, want)
	}
	d.Config.Model = strings.Repeat("m", 300)
	if got := summary(sandbox.Event{Type: sandbox.TypeSandboxUpdated, Data: d}, 40); len([]rune(got)) > 40 {
		t.Fatalf("gist of %d runes past 40: %q", len([]rune(got)), got)
	}
}

// TestSandboxCreateFlags: `sandbox create --tool-output --mode --model`
// makes a sandbox that keeps its commands' output and whose agent starts
// in that mode and model.
func TestSandboxCreateFlags(t *testing.T) {
	srv, _ := startSandbox(t)
	r := mustRun(t, srv.URL, "sandbox", "create", "--tool-output", "--mode", "plan", "--model", "demo-large", "--json")
	var sb sandbox.Sandbox
	if err := json.Unmarshal([]byte(r.out), &sb); err != nil {
		t.Fatalf("sandbox create --json: %v\n%s", err, r.out)
	}
	runTurn(t, srv, sb.ID, "mode")
	got, err := srv.Client.GetSandbox(testCtx(t), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.ToolOutput || got.Config == nil || got.Config.Mode != "plan" || got.Config.Model != "demo-large" {
		t.Fatalf("sandbox created with --tool-output --mode plan --model demo-large: tool_output %v, config %+v", got.ToolOutput, got.Config)
	}
}
