package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"svc.dev/svc/client"
	"svc.dev/svc/internal/projections"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/merkle"
	"svc.dev/svc/signer"
	"svc.dev/svc/witness"
)

func TestWitnessHelp(t *testing.T) {
	helpCovers(t, "witness", "key", "log-url", "checkpoints-url", "out", "tenant", "every", "once", "listen", "name", "c2sp-log")
}

func TestWitnessUsageErrors(t *testing.T) {
	dir := t.TempDir()
	_, keyPath, _ := testKey(t, dir, "w")
	base := []string{"witness", "--key", keyPath, "--log-url", "http://127.0.0.1:1", "--checkpoints-url", "http://127.0.0.1:1", "--out", dir}
	checkCLIErrors(t, []cliError{
		{[]string{"witness"}, 2, "are required"},
		{[]string{"witness", "--key", keyPath, "--log-url", "http://x"}, 2, "are required"},
		{append(append([]string{}, base...), "--every", "0"), 2, "--every must be"},
		{[]string{"witness", "--key", keyPath, "--log-url", "log.example.com", "--checkpoints-url", "http://x", "--out", dir}, 2, "--log-url"},
		{append(append([]string{}, base...), "extra"), 2, "unexpected argument"},
		{append(append([]string{}, base...), "--no-such-flag"), 2, "no-such-flag"},
		{[]string{"witness", "--key", filepath.Join(dir, "missing.key"), "--log-url", "http://x", "--checkpoints-url", "http://x", "--out", dir}, 1, "missing.key"},
		{append(append([]string{}, base...), "--tenant", "a/b"), 1, "tenant"},
	})
}

// TestWitnessOnce: one cycle countersigns (exit 0); one that cannot reach the log
// exits 1 and moves nothing.
func TestWitnessOnce(t *testing.T) {
	l := startMonitoredLog(t)
	grow(t, l, "default", 4)
	grow(t, l, "acme", 2)
	dir := t.TempDir()
	wKey, keyPath, _ := testKey(t, dir, "witness")
	out := filepath.Join(dir, "out")
	args := []string{"witness", "--key", keyPath, "--log-url", l.URL, "--checkpoints-url", l.CheckpointsURL, "--out", out, "--once"}
	code, _, errOut := runSvc(t, append(args, "--tenant", "default", "--tenant", "acme")...)
	if code != 0 || !strings.Contains(errOut, "outcome=countersigned") {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	for _, f := range []string{"default/4.json", "default/latest.json", "default/state.json", "acme/2.json", ".well-known/svc-witness.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Fatal(err)
		}
	}
	data, _ := os.ReadFile(filepath.Join(out, "default", "latest.json"))
	cp, err := client.ParseCheckpoint(data)
	if err != nil || len(cp.File.Envelope.VerifiedBy([]signer.PublicKey{l.Key.Public(), wKey.Public()})) != 2 {
		t.Fatalf("countersigned checkpoint: %v", err)
	}
	// Without --tenant, the default tenant; nothing new: unchanged, exit 0.
	if code, _, errOut := runSvc(t, args...); code != 0 || !strings.Contains(errOut, "outcome=unchanged") {
		t.Fatalf("second cycle: exit %d\n%s", code, errOut)
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	code, _, errOut = runSvc(t, "witness", "--key", keyPath, "--log-url", dead.URL, "--checkpoints-url", dead.URL, "--out", out, "--once")
	if code != 1 || !strings.Contains(errOut, "outcome=error") {
		t.Fatalf("unreachable log: exit %d\n%s", code, errOut)
	}
}

// TestWitnessServesC2SP: svc witness --listen serves C2SP tlog-witness: it cosigns a
// C2SP log's checkpoint posted by the log's client (projections.AddCheckpoint), the
// cosignature verifying with the cosigner key it printed; --listen without --name or
// --c2sp-log, and those without --listen, are usage errors. Over the real listener a
// garbage body is 400, an oversized one 413, and one address's flood of half-sent
// requests leaves another address served.
func TestWitnessServesC2SP(t *testing.T) {
	dir := t.TempDir()
	_, keyPath, _ := testKey(t, dir, "w")
	skey, vkey, err := note.GenerateKey(rand.Reader, "log.example.com/acme")
	if err != nil {
		t.Fatal(err)
	}
	checkCLIErrors(t, []cliError{
		{[]string{"witness", "--key", keyPath, "--out", dir, "--listen", "127.0.0.1:0"}, 2, "--listen needs --name"},
		{[]string{"witness", "--key", keyPath, "--out", dir, "--name", "w.example.com", "--c2sp-log", vkey, "--log-url", "http://x", "--checkpoints-url", "http://x"}, 2, "need --listen"},
		{[]string{"witness", "--key", keyPath, "--out", dir}, 2, "are required"},
	})
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut := &testkit.LockedBuffer{}, &testkit.LockedBuffer{}
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"witness", "--key", keyPath, "--out", filepath.Join(dir, "out"), "--listen", "127.0.0.1:0", "--name", "w.example.com/1", "--c2sp-log", vkey}, out, errOut)
	}()
	defer func() { cancel(); <-done }()
	var addr, cosKey string
	testkit.Eventually(t, 10*time.Second, func() error {
		_, err := fmt.Sscanf(out.String(), "C2SP witness on %s cosigner key %s", &addr, &cosKey)
		return err
	})
	s, _ := note.NewSigner(skey)
	signed, err := note.Sign(&note.Note{Text: projections.CheckpointBody("log.example.com/acme", 1, merkle.LeafHash([]byte("x")))}, s)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := projections.AddCheckpoint(ctx, http.DefaultClient, strings.TrimSuffix(strings.TrimSuffix(addr, ","), "/add-checkpoint"), 0, nil, signed)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	cv, err := witness.NewCosignatureVerifier(cosKey)
	if err != nil {
		t.Fatal(err)
	}
	lv, _ := note.NewVerifier(vkey)
	if n, err := note.Open(append(signed, lines...), note.VerifierList(lv, cv)); err != nil || len(n.Sigs) != 2 {
		t.Fatalf("the cosignature does not verify with the printed key: %v\n%s", err, lines)
	}

	// A stranger over the real listener: garbage is 400, a body over the cap 413, and
	// one address (127.0.0.2) opening more connections than the server serves at once
	// (1,024), each with a half-sent request, holds only its share (64) and leaves
	// another address cosigned at once.
	hostPort := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(addr, ","), "http://"), "/add-checkpoint")
	if code, body := postFrom(t, "127.0.0.3", hostPort, "/add-checkpoint", "", "garbage"); code != http.StatusBadRequest || !strings.Contains(body, "old <size>") {
		t.Fatalf("a garbage body: %d %s", code, body)
	}
	if code, body := postFrom(t, "127.0.0.3", hostPort, "/add-checkpoint", "", "old 1\n\n"+strings.Repeat("x", witness.MaxAddCheckpointBody)); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body over %d bytes: %d %s", witness.MaxAddCheckpointBody, code, body)
	}
	for range 1100 {
		c := dialFrom(t, "127.0.0.2", hostPort)
		io.WriteString(c, "POST /add-checkpoint HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nold")
	}
	time.Sleep(200 * time.Millisecond)
	if code, body := postFrom(t, "127.0.0.3", hostPort, "/add-checkpoint", "", string(projections.AddCheckpointBody(1, nil, signed))); code != http.StatusOK || !strings.HasPrefix(body, "— w.example.com/1 ") {
		t.Fatalf("another address while 127.0.0.2 floods: %d %s", code, body)
	}
}
