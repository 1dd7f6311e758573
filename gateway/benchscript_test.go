package gateway_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGatewayBenchmarkScriptRuns keeps `go tool task bench:gateway` working: a short
// run of e2e/bench-gateway.mjs (the TS SDK client, the npm filesystem server, the real
// svc gateway over stdio and HTTP) reports every variant with plausible figures. The
// filesystem server itself stands in for a peer gateway (--peer), which checks that the
// peer's command line gets its placeholders filled.
func TestGatewayBenchmarkScriptRuns(t *testing.T) {
	nodeModules(t)
	cmd := exec.Command("node", filepath.Join(repoDir, "e2e", "bench-gateway.mjs"), "--svc", svcBin, "--work", t.TempDir(),
		"--calls", "20", "--inflight", "4", "--sessions", "3", "--rounds", "2", "--json", "--peer", `["{node}","{server}","{data}"]`)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bench-gateway.mjs: %v\n%s", err, stderr.String())
	}
	// The output is { rounds, loadAverages, rows }, each row the medians over the rounds
	// with each round's figures (since the round-robin rounds).
	var doc struct {
		Rounds       int       `json:"rounds"`
		LoadAverages []float64 `json:"loadAverages"`
		Rows         []struct {
			Name             string            `json:"name"`
			CallsPerSec      float64           `json:"callsPerSec"`
			CPUPerCallMicros any               `json:"cpuPerCallMicros"`
			Rounds           []json.RawMessage `json:"rounds"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if doc.Rounds != 2 || len(doc.LoadAverages) != 2 {
		t.Fatalf("rounds %d, load averages %v, want 2 of each", doc.Rounds, doc.LoadAverages)
	}
	rows := doc.Rows
	want := []string{"direct (stdio)", "peer: node (stdio)", "svc gateway (stdio)", "svc gateway --http (1 session)", "svc gateway --http (3 sessions)"}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %s", len(rows), len(want), out)
	}
	for i, r := range rows {
		if r.Name != want[i] || r.CallsPerSec <= 0 || len(r.Rounds) != 2 {
			t.Errorf("row %d: %+v, want %q with calls/s > 0 and two rounds", i, r, want[i])
		}
		if i > 0 {
			if cpu, ok := r.CPUPerCallMicros.(float64); !ok || cpu <= 0 {
				t.Errorf("%s: gateway CPU per call %v, want > 0", r.Name, r.CPUPerCallMicros)
			}
		}
	}
}
