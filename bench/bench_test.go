package bench_test

import (
	"context"
	"testing"

	"svc.dev/svc/bench"
	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/signer"
)

// TestRunChecksEveryAnswer drives a real log over HTTP: every proof verifies, every
// head is consistent with the last, and a run against the wrong key fails the proofs.
func TestRunChecksEveryAnswer(t *testing.T) {
	l := logtest.Start(t, logtest.Options{Tenants: []logtest.Tenant{{ID: "default"}}}) // no token: not rate limited
	cfg := bench.Config{Clients: 4, Count: 200, LeafBytes: 64, Keys: []signer.PublicKey{l.Key.Public()}}
	res, err := bench.Run(context.Background(), bench.NewHTTP(l.URL, "", 4), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Appends != 200 || res.Errors != 0 || !res.ProofsOK || !res.Consistent || res.Heads == 0 || res.P50 <= 0 {
		t.Fatalf("run: %+v", res)
	}
	other, _ := signer.GenerateKey()
	cfg.Keys, cfg.Count = []signer.PublicKey{other.Public()}, 10
	res, err = bench.Run(context.Background(), bench.NewHTTP(l.URL, "", 4), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.ProofsOK || res.FailedCheck == "" || res.Errors != 10 {
		t.Fatalf("a head signed by another key passed: %+v", res)
	}
	if _, err := bench.Run(context.Background(), bench.NewHTTP(l.URL, "", 1), bench.Config{Clients: 0, Count: 1, LeafBytes: 64, Keys: cfg.Keys}); err == nil {
		t.Fatal("0 clients accepted")
	}
}
