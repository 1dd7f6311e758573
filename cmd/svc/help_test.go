package main

import (
	"sort"
	"strings"
	"testing"
)

// TestEveryCommandHasCompleteHelp: `svc <command> --help` exits 0 and shows a usage
// line, a description with an example, and every flag the command defines.
func TestEveryCommandHasCompleteHelp(t *testing.T) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) < 16 {
		t.Fatalf("only %d commands registered: %v", len(names), names)
	}
	for _, name := range names {
		args := []string{name, "--help"}
		if name == "bench" {
			args = []string{"bench", "append", "--help"}
		}
		if name == "replay" {
			args = []string{"replay", "logfile", "--help"}
		}
		code, _, errOut := runSvc(t, args...)
		if code != 0 {
			t.Errorf("svc %s --help: exit %d", name, code)
			continue
		}
		if !strings.Contains(errOut, "Usage: svc "+name) {
			t.Errorf("svc %s --help has no usage line:\n%s", name, errOut)
		}
		if !strings.Contains(errOut, "Example") {
			t.Errorf("svc %s --help has no example:\n%s", name, errOut)
		}
		if strings.Count(errOut, "\n  -") == 0 {
			t.Errorf("svc %s --help lists no flags:\n%s", name, errOut)
		}
	}
	// The top-level help lists every command.
	code, _, errOut := runSvc(t, "--help")
	for _, name := range names {
		if code != 0 || !strings.Contains(errOut, "  "+name+" ") {
			t.Errorf("svc --help does not list %s", name)
		}
	}
}
