package gateway_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"svc.dev/svc/receipt"
)

// TestGatewayKilledLosesNoReceipt drives the real `svc gateway` process over stdio
// with the mcp-go client, kills it with SIGKILL in the middle of a run of calls, and
// starts it again: every receipt id the agent was handed has its file, which
// `svc verify` passes against the log file, whatever the kill caught in flight.
func TestGatewayKilledLosesNoReceipt(t *testing.T) {
	up := startRecordingUpstream(t)
	f := newFixture(t, func(cfg map[string]any) {
		cfg["upstream"] = map[string]any{"url": up.url}
		delete(cfg, "facts")
		cfg["precommit"] = []string{"lookup"} // two leaves a call: the authorization, then the receipt
	})
	os.WriteFile(filepath.Join(f.dir, "policy.cedar"), []byte(`@id("all") permit (principal, action, resource);`), 0o644)
	f.writeGrant(t, "grant.json", []string{"lookup"}, time.Now().Add(-time.Minute), time.Hour, nil)

	cmd, c := startStdioGateway(t, f.config)
	var handedOut []string
	for len(handedOut) < 40 {
		req := mcp.CallToolRequest{}
		req.Params.Name = "lookup"
		req.Params.Arguments = map[string]any{"q": "crash"}
		r, err := c.CallTool(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := r.Meta.AdditionalFields["svc/receipt"].(string)
		if r.IsError || id == "" {
			t.Fatalf("call %d: %+v", len(handedOut), r)
		}
		handedOut = append(handedOut, id)
	}
	// Killed the moment the last result arrived: its file is, most likely, not
	// written yet (the writer waits for a quiet moment).
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	_, lastErr := os.Stat(filepath.Join(f.dir, "receipts", handedOut[len(handedOut)-1]+".json"))
	t.Logf("the last receipt's file existed at the kill: %v", lastErr == nil)

	// The restart rebuilds what the kill lost; a clean stop (stdin closed) writes the rest.
	cmd, c = startStdioGateway(t, f.config)
	c.Close()
	cmd.Wait()
	missing := 0
	for _, id := range handedOut {
		if _, err := os.Stat(filepath.Join(f.dir, "receipts", id+".json")); err != nil {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d receipts handed out have no file after the restart", missing, len(handedOut))
	}
	for _, id := range []string{handedOut[0], handedOut[len(handedOut)/2], handedOut[len(handedOut)-1]} {
		out, err := exec.Command(svcBin, "verify", filepath.Join(f.dir, "receipts", id+".json"), "--issuer-key", filepath.Join(f.dir, "gateway.pub"),
			"--principal-key", filepath.Join(f.dir, "alice.pub"), "--log", filepath.Join(f.dir, "receipts.log")).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "PASS authorization logged before execution") {
			t.Fatalf("svc verify %s: %v\n%s", id, err, out)
		}
	}
	// Every file in the directory is a whole bundle.
	files, _ := filepath.Glob(filepath.Join(f.dir, "receipts", "*.json"))
	for _, file := range files {
		if _, err := receipt.ReadBundle(file); err != nil {
			t.Fatalf("%s: %v", filepath.Base(file), err)
		}
	}
	t.Logf("%d receipts handed out before SIGKILL, %d files after the restart", len(handedOut), len(files))
}
