package logserver_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"svc.dev/svc/internal/logtest"
)

// TestCheckpointNoteRoute: with the in-process key, checkpoints are also published as
// C2SP signed notes; /checkpoint serves the latest, verifiable with the published
// verifier key, its origin the tenant's log id.
func TestCheckpointNoteRoute(t *testing.T) {
	l := logtest.Start(t, logtest.Options{Notes: true, Tenants: []logtest.Tenant{{ID: "acme", LogID: "log.example.com/acme"}}})
	svc, ts := l.Service, l
	if code, _, _ := do(t, "GET", ts.URL+"/t/acme/checkpoint", "", ""); code != 404 {
		t.Fatalf("before any checkpoint: %d", code)
	}
	for _, leaf := range []string{"one", "two", "three"} {
		if code, _, body := do(t, "POST", ts.URL+"/t/acme/append", "", `{"leaf":"`+leaf+`"}`); code != 200 {
			t.Fatalf("append: %d %s", code, body)
		}
	}
	if err := svc.Checkpointer("acme").Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	code, _, body := do(t, "GET", ts.URL+"/t/acme/checkpoint", "", "")
	if code != 200 || !strings.HasPrefix(body, "log.example.com/acme\n3\n") {
		t.Fatalf("/checkpoint: %d %q", code, body)
	}
	vkey, err := os.ReadFile(filepath.Join(l.CheckpointDir, "acme", "checkpoint.vkey"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(strings.TrimSpace(string(vkey)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := note.Open([]byte(body), note.VerifierList(v)); err != nil {
		t.Fatalf("the note does not verify with the published key: %v", err)
	}
}
