package witness_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"svc.dev/svc/client"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// TestVerifyWithWitnessURL: `svc verify --witness-url` passes for a receipt whose head
// a witness-countersigned checkpoint covers (proved consistent by the log), and fails
// for a receipt the witness has not seen yet.
func TestVerifyWithWitnessURL(t *testing.T) {
	dir := t.TempDir()
	logKey, _ := signer.GenerateKey()
	wKey, _ := signer.GenerateKey()
	sdkKey, _ := signer.GenerateKey()
	wKeyPath, _, _ := wKey.WriteKeyFiles(dir, "witness")
	_, logPub, _ := logKey.WriteKeyFiles(dir, "log")
	_, sdkPub, _ := sdkKey.WriteKeyFiles(dir, "sdk")
	a := startLog(t, filepath.Join(dir, "a"), logKey)
	logSrv := httptest.NewServer(a.Service.Handler())
	defer logSrv.Close()
	cpSrv := httptest.NewServer(http.FileServer(http.Dir(a.CheckpointDir)))
	defer cpSrv.Close()
	hl, err := client.NewHTTPLog(client.HTTPLogConfig{URL: logSrv.URL + "/append", Token: defaultToken})
	if err != nil {
		t.Fatal(err)
	}
	is, err := receipt.NewIssuer(receipt.IssuerConfig{Key: sdkKey, Kind: receipt.KindSDK, Log: hl, ReceiptsDir: filepath.Join(dir, "receipts")})
	if err != nil {
		t.Fatal(err)
	}
	issue := func() string {
		p, err := is.Begin(receipt.Call{Principal: receipt.Principal{Provenance: receipt.Claimed}, Agent: receipt.Agent{ID: "bot", Provenance: receipt.Claimed},
			Session: receipt.Session{Provenance: receipt.Claimed}, Model: receipt.Model{Provenance: receipt.Claimed},
			Tool: receipt.Tool{Name: "lookup", Provenance: receipt.Claimed}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := is.Finish(context.Background(), p, receipt.Execution{Status: receipt.StatusExecuted, Result: []byte(`"ok"`), Provenance: receipt.Claimed}); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(dir, "receipts", p.ReceiptID+".json")
	}
	seen := issue()
	appendLeaves(t, logSrv.URL, "default", "after", 3)
	tick(t, a, "default")
	out := filepath.Join(dir, "witness-out")
	os.MkdirAll(out, 0o755)
	if code, _, e := runBin(t, "witness", "--key", wKeyPath, "--log-url", logSrv.URL, "--checkpoints-url", cpSrv.URL, "--out", out, "--once"); code != 0 {
		t.Fatalf("witness --once: %d\n%s", code, e)
	}
	wSrv := fileServer(out)
	defer wSrv.Close()
	verify := func(bundle string) (int, string) {
		code, o, e := runBin(t, "verify", bundle, "--issuer-key", sdkPub, "--log-key", logPub, "--log-url", logSrv.URL, "--witness-url", wSrv.URL)
		return code, o + e
	}
	code, text := verify(seen)
	if code != 0 || !strings.Contains(text, "PASS tree head countersigned by a witness: consistent with the checkpoint at size 4") {
		t.Fatalf("a witnessed receipt: exit %d\n%s", code, text)
	}
	unseen := issue() // after the witnessed checkpoint
	code, text = verify(unseen)
	if code != 1 || !strings.Contains(text, "FAIL tree head countersigned by a witness: the witness has countersigned only up to size 4") {
		t.Fatalf("a receipt the witness has not seen: exit %d\n%s", code, text)
	}
}
