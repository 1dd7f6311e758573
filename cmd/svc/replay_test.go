package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"svc.dev/svc/internal/logservice"

	"svc.dev/svc/merkle"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

func TestReplayRebuildsProjections(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	key, _ := signer.GenerateKey()
	start := func() *logservice.Service {
		svc, err := logservice.Start(context.Background(), logservice.Config{
			DataDir: data, Signer: receipt.KeySigner{Key: key},
			Keys:    func(context.Context) (*signer.KeyDocument, error) { return nil, nil },
			Tenants: []logservice.TenantSpec{{ID: "default", File: filepath.Join(dir, "log.jsonl")}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	svc := start()
	c, err := pipeline.NewClient(svc.Conn(), pipeline.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 300; i++ {
		l := pipeline.NewLeaf([]byte(fmt.Sprintf(`{"replay":%d}`, i)))
		if i%3 == 0 {
			l.Data = nil
		}
		if _, err := c.Append(context.Background(), "default", l); err != nil {
			t.Fatal(err)
		}
	}
	root := svc.Sequencer("default").Tree().Root()
	c.Close()
	svc.Close()

	out := filepath.Join(dir, "rebuilt.jsonl")
	code, stdout, stderr := runSvc(t, "replay", "logfile", "--data", data, "--out", out)
	if code != 0 {
		t.Fatalf("replay logfile: %d\n%s\n%s", code, stdout, stderr)
	}
	want, _ := os.ReadFile(filepath.Join(dir, "log.jsonl"))
	got, _ := os.ReadFile(out)
	if len(want) == 0 || !bytes.Equal(got, want) {
		t.Fatalf("replayed log file differs from the projection's (%d vs %d bytes)", len(got), len(want))
	}
	if !strings.Contains(stderr, "100.0%") {
		t.Fatalf("no progress shown:\n%s", stderr)
	}
	if code, _, stderr := runSvc(t, "replay", "metering", "--data", data); code != 0 {
		t.Fatalf("replay metering: %d %s", code, stderr)
	}
	if code, stdout, stderr := runSvc(t, "replay", "tree", "--data", data); code != 0 || !strings.Contains(stdout, "300 leaves") {
		t.Fatalf("replay tree: %d %s %s", code, stdout, stderr)
	}
	// The service starts on the rebuilt projections with the same log.
	svc = start()
	defer svc.Close()
	if got := svc.Sequencer("default").Tree().Root(); got != root {
		t.Fatalf("root after replay %s, before %s", got, root)
	}
	f, _ := os.Open(out)
	entries, err := merkle.ReadLogFile(f)
	f.Close()
	if err != nil || len(entries) != 300 || entries[0].Kind != merkle.LineHash || entries[1].Kind != merkle.LineLeaf {
		t.Fatalf("rebuilt file: %v, %d entries", err, len(entries))
	}
	if code, _, stderr := runSvc(t, "replay", "nonsense", "--data", data); code != 2 || !strings.Contains(stderr, "unknown projection") {
		t.Fatalf("unknown projection: %d %s", code, stderr)
	}
}
