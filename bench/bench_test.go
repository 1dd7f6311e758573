package bench_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/bench"
	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/signer"
)

// TestRunChecksEveryAnswer drives a real log over HTTP: every proof verifies, every
// head is consistent with the last, and a run against the wrong key fails the proofs.
func TestRunChecksEveryAnswer(t *testing.T) {
	l := logtest.Start(t, logtest.Options{Tenants: []logtest.Tenant{{ID: "default"}}}) // no token: not rate limited
	cfg := bench.Config{Clients: 4, Count: 200, LeafBytes: 64, Keys: []signer.PublicKey{l.Key.Public()}}
	res, err := bench.Run(context.Background(), bench.NewHTTP(l.URL, nil, 4), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Appends != 200 || res.Errors != 0 || !res.ProofsOK || !res.Consistent || res.Heads == 0 || res.P50 <= 0 {
		t.Fatalf("run: %+v", res)
	}
	other, _ := signer.GenerateKey()
	cfg.Keys, cfg.Count = []signer.PublicKey{other.Public()}, 10
	res, err = bench.Run(context.Background(), bench.NewHTTP(l.URL, nil, 4), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.ProofsOK || res.FailedCheck == "" || res.Errors != 10 {
		t.Fatalf("a head signed by another key passed: %+v", res)
	}
	if _, err := bench.Run(context.Background(), bench.NewHTTP(l.URL, nil, 1), bench.Config{Clients: 0, Count: 1, LeafBytes: 64, Keys: cfg.Keys}); err == nil {
		t.Fatal("0 clients accepted")
	}
}

// TestRunCountsRefusals (issue 29, point 7): against a log that limits each token
// (SPEC: 50 appends/s, burst 100), one token's 429s are counted as refusals, not
// errors or appends; the clients wait the Retry-After and the run still makes its
// count; the table warns. Three fresh tokens taken in turn carry the same run unrefused.
func TestRunCountsRefusals(t *testing.T) {
	l := logtest.Start(t, logtest.Options{Tenants: []logtest.Tenant{{ID: "default", Token: "t1", More: []string{"t2", "t3", "t4"}}}})
	cfg := bench.Config{Clients: 64, Count: 150, Duration: time.Minute, LeafBytes: 64, Keys: []signer.PublicKey{l.Key.Public()}}
	one, err := bench.Run(context.Background(), bench.NewHTTP(l.URL, []string{"t1"}, 64), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if one.Appends != 150 || one.Errors != 0 || one.Refused == 0 || !one.ProofsOK {
		t.Fatalf("one token, 150 appends by 64 clients: %+v; want 150 appends, 0 errors, some refused", one)
	}
	var table bytes.Buffer
	bench.WriteTable(&table, []*bench.Result{one})
	if !strings.Contains(table.String(), "WARNING") || !strings.Contains(table.String(), "rate limit") {
		t.Fatalf("no warning of the refusals:\n%s", table.String())
	}
	three, err := bench.Run(context.Background(), bench.NewHTTP(l.URL, []string{"t2", "t3", "t4"}, 64), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if three.Appends != 150 || three.Errors != 0 || three.Refused != 0 {
		t.Fatalf("three tokens in turn (each a fresh burst of 100), 150 appends: %+v; want none refused", three)
	}
}
