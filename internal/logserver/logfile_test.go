package logserver_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"svc.dev/svc/internal/logservice"
	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// Issue 17, row 10: the --file log catches up while the server is idle. Appends sent
// back to back leave lines pending; with no later append, they reach the file within
// a second anyway, read while the server runs.
func TestLogFileCatchesUpWhileIdle(t *testing.T) {
	ts := logtest.Start(t, logtest.Options{Tenants: []logtest.Tenant{{ID: "default", File: "default.log"}}})
	file := filepath.Join(ts.Dir, "default.log")
	waitLines := func(n int, within time.Duration) {
		t.Helper()
		testkit.Eventually(t, within, func() error {
			data, _ := os.ReadFile(file)
			if got := bytes.Count(data, []byte("\n")); got < n {
				return fmt.Errorf("the running server's file holds %d lines after the last append, want %d", got, n)
			}
			return nil
		})
	}
	code, _, body := do(t, "POST", ts.URL+"/append", "", `{"leaf":"first"}`)
	if code != 200 {
		t.Fatalf("append: %d %s", code, body)
	}
	waitLines(1, 2*time.Second)
	// Back to back: the second batch finds the last write under 500 ms old and
	// stays pending; nothing follows.
	for i := range 5 {
		if code, _, body := do(t, "POST", ts.URL+"/append", "", `{"leaf":"burst `+strconv.Itoa(i)+`"}`); code != 200 {
			t.Fatalf("append: %d %s", code, body)
		}
	}
	waitLines(6, time.Second)
}

// A stop right after the last acknowledged append leaves a file holding every
// acknowledged leaf: the stopping projection takes what the stream committed first.
func TestLogFileCompleteAfterStop(t *testing.T) {
	for round := range 3 {
		dir := t.TempDir()
		key, _ := signer.GenerateKey()
		file := filepath.Join(dir, "default.log")
		svc, err := logservice.Start(context.Background(), logservice.Config{
			DataDir: dir, Signer: receipt.KeySigner{Key: key},
			Keys:    func(context.Context) (*signer.KeyDocument, error) { return nil, nil },
			Tenants: []logservice.TenantSpec{{ID: "default", File: file}},
		})
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(svc.Handler())
		for i := range 20 {
			if code, _, body := do(t, "POST", ts.URL+"/append", "", `{"leaf":"round `+strconv.Itoa(round)+` leaf `+strconv.Itoa(i)+`"}`); code != 200 {
				t.Fatalf("append: %d %s", code, body)
			}
		}
		ts.Close()
		svc.Close() // at once after the last acknowledgement
		data, _ := os.ReadFile(file)
		if n := bytes.Count(data, []byte("\n")); n != 20 {
			t.Fatalf("round %d: the stopped server's file holds %d lines, want the 20 acknowledged", round, n)
		}
	}
}
