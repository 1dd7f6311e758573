package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/exporters"
	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/pgtest"
	"svc.dev/svc/internal/store"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/pipeline/consume"
)

// TestExportsCommandDatabaseProjections: with --db-env, `svc exports status` shows the
// database projections beside the exporters (position, backlog, the dead letter of a
// message that did not decode), and `dead replay` leaves a letter that still does not
// decode in SVC_DEAD and says so (exit 1).
func TestExportsCommandDatabaseProjections(t *testing.T) {
	ns := testkit.ListeningBroker(t)
	dbURL := pgtest.New(t)
	t.Setenv("TEST_EXPORTS_DB", dbURL)
	t.Setenv("HEC_TOKEN", "hec-token")
	cfgPath := filepath.Join(t.TempDir(), "gateway.json")
	data, _ := json.Marshal(map[string]any{"log": map[string]any{"nats": natsembed.URL(ns, "pw-of-tests"), "tenant": "acme"},
		"splunk": map[string]any{"url": "http://127.0.0.1:1", "tokenEnv": "HEC_TOKEN"}})
	if err := os.WriteFile(cfgPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	nc, err := natsembed.Connect(ns, "test", pipeline.Credentials{URL: natsembed.URL(ns, "pw-of-tests")})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if err := pipeline.EnsureStreams(ctx, js, pipeline.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	if err := exporters.EnsureReceiptStream(ctx, js, 1); err != nil { // as an issuer's sink does
		t.Fatal(err)
	}
	bad, err := js.Publish(ctx, pipeline.AdminSubject("acme"), []byte("{not json"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- st.Run(rctx, js) }()
	defer func() { stop(); <-done }()

	testkit.Eventually(t, 10*time.Second, func() error {
		code, out, errOut := runSvc(t, "exports", "status", "--config", cfgPath, "--db-env", "TEST_EXPORTS_DB", "--json")
		if code != 0 {
			return fmt.Errorf("status: exit %d %s", code, errOut)
		}
		var rows []consume.Status
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			return fmt.Errorf("status %q: %w", out, err)
		}
		for _, r := range rows {
			if r.Exporter == store.HandlerAdmin {
				if r.Position != bad.Sequence || r.Backlog != 0 || r.DeadLetters != 1 {
					return fmt.Errorf("admin projection row %+v: want position %d, no backlog, one dead letter", r, bad.Sequence)
				}
				return nil
			}
		}
		return fmt.Errorf("no %s row in %s", store.HandlerAdmin, out)
	})
	code, out, errOut := runSvc(t, "exports", "dead", "replay", "--config", cfgPath, "--db-env", "TEST_EXPORTS_DB")
	if code != 1 || !strings.Contains(out, "delivered 0 dead letters") || !strings.Contains(errOut, consume.DeadStream) {
		t.Fatalf("dead replay of an undecodable letter: exit %d, %q, %q; want exit 1 naming %s", code, out, errOut, consume.DeadStream)
	}
	if letters, err := consume.ListDead(ctx, js, ""); err != nil || len(letters) != 1 || letters[0].Handler != store.HandlerAdmin {
		t.Fatalf("SVC_DEAD after the replay: %+v, %v; want the one admin letter still there", letters, err)
	}
}
