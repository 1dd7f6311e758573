package logexport_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/conformance"
	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/logexport"
	"svc.dev/svc/merkle"
)

const token = "acme-export-token"

// startLog runs a real log service whose tenant acme starts from a log file of
// preloaded leaf hashes (adopted into the log at start).
func startLog(t *testing.T, preload int) *logtest.Log {
	t.Helper()
	dir := t.TempDir()
	var lines bytes.Buffer
	for i := 0; i < preload; i++ {
		fmt.Fprintf(&lines, "{\"hash\":\"%s\"}\n", merkle.LeafHash([]byte(fmt.Sprintf("preloaded %d", i))))
	}
	if err := os.WriteFile(filepath.Join(dir, "acme.log"), lines.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return logtest.Start(t, logtest.Options{Dir: dir, Tenants: []logtest.Tenant{
		{ID: "default", Token: "default-token"},
		{ID: "acme", LogID: "acme-prod", File: "acme.log", Token: token},
	}})
}

// grow appends n leaves to tenant and publishes a checkpoint.
func grow(t *testing.T, l *logtest.Log, tenant string, n int) {
	t.Helper()
	l.Grow(t, tenant, "grown", n)
	l.Checkpoint(t, tenant)
}

func TestExport(t *testing.T) {
	l := startLog(t, 12345)
	if err := l.Service.Checkpointer("acme").Tick(context.Background()); err != nil { // a checkpoint at 12345
		t.Fatal(err)
	}
	grow(t, l, "acme", 3) // and one at 12348
	grow(t, l, "default", 4)
	ctx := context.Background()

	t.Run("a real tenant adds up", func(t *testing.T) {
		out := t.TempDir()
		var progress bytes.Buffer
		start := time.Now()
		res, err := logexport.Run(ctx, logexport.Options{LogURL: l.URL, Tenant: "acme", Token: token, Out: out, Progress: &progress})
		if err != nil {
			t.Fatal(err)
		}
		var text bytes.Buffer
		res.WriteText(&text)
		if !res.OK {
			t.Fatalf("export does not add up:\n%s", text.String())
		}
		t.Logf("exported 12,348 leaves in %s", time.Since(start).Round(time.Millisecond))
		if !strings.Contains(progress.String(), "leaves 10000/12348") || !strings.Contains(progress.String(), "leaves 12348/12348") {
			t.Fatalf("progress:\n%s", progress.String())
		}
		last := strings.TrimSpace(text.String())
		last = last[strings.LastIndex(last, "\n")+1:]
		if !strings.HasPrefix(last, logexport.AddsUp+": tenant acme, 12348 leaves") {
			t.Fatalf("result line %q", last)
		}
		var sum logexport.Summary
		data, _ := os.ReadFile(filepath.Join(out, "export.json"))
		if err := json.Unmarshal(data, &sum); err != nil {
			t.Fatal(err)
		}
		if sum.Tenant != "acme" || sum.LogID != "acme-prod" || sum.TreeSize != 12348 || sum.Counts.Leaves != 12348 || sum.Counts.Checkpoints != 2 || len(sum.Files) != 6 || sum.ExportedAt == "" {
			t.Fatalf("export.json: %s", data)
		}
		for _, f := range sum.Files {
			b, err := os.ReadFile(filepath.Join(out, f.Name))
			if err != nil {
				t.Fatal(err)
			}
			h := sha256.Sum256(b)
			if hex.EncodeToString(h[:]) != f.SHA256 || int64(len(b)) != f.Bytes {
				t.Fatalf("%s: sha256 or size differs from export.json", f.Name)
			}
		}
		// log.jsonl is a SPEC log file that rebuilds the head's root.
		c, err := conformance.OpenFileCopy(filepath.Join(out, "log.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		root, _ := c.RootAt(12348)
		if root.String() != sum.RootHash {
			t.Fatal("log.jsonl does not give the head's root")
		}
		first, _ := os.ReadFile(filepath.Join(out, "log.jsonl"))
		if want := fmt.Sprintf("{\"hash\":\"%s\"}\n", merkle.LeafHash([]byte("preloaded 0"))); !strings.HasPrefix(string(first), want) {
			t.Fatalf("first line %q", first[:80])
		}
		if left, _ := filepath.Glob(filepath.Join(out, ".export-*")); len(left) != 0 {
			t.Fatalf("temporary files left: %v", left)
		}
	})
	t.Run("small pages and the default tenant", func(t *testing.T) {
		out := t.TempDir()
		res, err := logexport.Run(ctx, logexport.Options{LogURL: l.URL, Tenant: "default", Token: "default-token", Out: out, PageSize: 3})
		if err != nil || !res.OK {
			t.Fatalf("%v %+v", err, res.Failed())
		}
		if res.Summary.TreeSize != 4 || !strings.Contains(res.Checks[3].Detail, "in 2 page(s)") {
			t.Fatalf("%+v", res.Checks)
		}
	})
	t.Run("leaves altered in transit do not add up", func(t *testing.T) {
		out := t.TempDir()
		res, err := logexport.Run(ctx, logexport.Options{LogURL: testkit.FlipLeafProxy(t, l.URL), Tenant: "acme", Token: token, Out: out})
		if err != nil {
			t.Fatal(err)
		}
		var text bytes.Buffer
		res.WriteText(&text)
		if res.OK || !strings.Contains(text.String(), "\n"+logexport.DoesNotAddUp+"\n") {
			t.Fatalf("tampered export:\n%s", text.String())
		}
		if !strings.Contains(text.String(), "FAIL "+logexport.CheckHeadRoot) || !strings.Contains(text.String(), "0 of 2 checkpoints match") {
			t.Fatalf("tampered export does not say what failed:\n%s", text.String())
		}
		entries, _ := os.ReadDir(out)
		if len(entries) != 0 {
			t.Fatalf("an export that does not add up left files: %v", entries)
		}
	})
	t.Run("a wrong token does not add up", func(t *testing.T) {
		res, err := logexport.Run(ctx, logexport.Options{LogURL: l.URL, Tenant: "acme", Token: "nope", Out: t.TempDir()})
		if err != nil || res.OK || !strings.Contains(res.Failed()[0].Detail, "401") {
			t.Fatalf("%v %+v", err, res)
		}
	})
}

func FuzzParseLeavesPage(f *testing.F) {
	f.Add([]byte(`{"since":0,"size":1,"leaves":["` + strings.Repeat("ab", 32) + `"]}`))
	f.Add([]byte(`{"since":5,"size":2,"leaves":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := logexport.ParseLeavesPage(data)
		if err != nil {
			return
		}
		if p.Since > p.Size || uint64(len(p.Leaves)) > p.Size-p.Since {
			t.Fatalf("accepted %d leaves from %d of %d", len(p.Leaves), p.Since, p.Size)
		}
	})
}
