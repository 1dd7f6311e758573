package witness_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/merkle"
	"svc.dev/svc/monitor"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
	"svc.dev/svc/witness"
)

// TestWitnessEndToEnd runs a real log service, the witness as its own process (the
// built svc binary, with its own output directory), and the probe and the auditor as
// processes too. Normal growth is countersigned; a lagging checkpoint fails
// log-check --max-lag; then (b) a fork at the same size, (c) a head signed by an
// unpublished key and (a) a rewritten history (a second log with another history
// behind the same URLs) each raise the alarm, leave the witness state where it was,
// and make both log-check and audit --witness-key fail.
func TestWitnessEndToEnd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logKey, _ := signer.GenerateKey()
	wKey, _ := signer.GenerateKey()
	wKeyPath, wPubPath, err := wKey.WriteKeyFiles(dir, "witness")
	if err != nil {
		t.Fatal(err)
	}
	a := startLog(t, filepath.Join(dir, "a"), logKey)
	front := newSwitchable(a.Service.Handler())
	logSrv := httptest.NewServer(front)
	defer logSrv.Close()
	cpFront := newSwitchable(http.FileServer(http.Dir(a.CheckpointDir)))
	cpSrv := httptest.NewServer(cpFront)
	defer cpSrv.Close()
	out := filepath.Join(dir, "witness-out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	wSrv := fileServer(out)
	defer wSrv.Close()
	defOut, acmeOut := filepath.Join(out, "default"), filepath.Join(out, "acme")
	witnessArgs := []string{"witness", "--key", wKeyPath, "--log-url", logSrv.URL, "--checkpoints-url", cpSrv.URL, "--out", out, "--tenant", "default", "--tenant", "acme"}
	once := func() (int, string) {
		code, _, errOut := runBin(t, append(witnessArgs, "--once")...)
		return code, errOut
	}
	logCheck := func(extra ...string) (int, string) {
		code, o, e := runBin(t, append([]string{"log-check", "--log-url", logSrv.URL, "--checkpoints-url", cpSrv.URL, "--witness-url", wSrv.URL,
			"--tenant", "default", "--tenant", "acme"}, extra...)...)
		return code, o + e
	}
	audit := func(older, newer string, extra ...string) (int, string) {
		code, o, e := runBin(t, append([]string{"audit", "--older", older, "--newer", newer, "--log-url", logSrv.URL}, extra...)...)
		return code, o + e
	}
	wantLines := func(what, text string, lines ...string) {
		t.Helper()
		for _, l := range lines {
			if !strings.Contains(text, l) {
				t.Fatalf("%s: output lacks %q:\n%s", what, l, text)
			}
		}
	}
	// logCheckFails runs log-check and wants exit 1 (exitWhat names the case) and
	// the lines in its output (linesWhat).
	logCheckFails := func(exitWhat, linesWhat string, lines ...string) {
		t.Helper()
		code, text := logCheck()
		if code != 1 {
			t.Fatalf("%s: exit %d\n%s", exitWhat, code, text)
		}
		wantLines(linesWhat, text, lines...)
	}

	// 1. Normal growth, countersigned by the witness running as its own process.
	appendLeaves(t, logSrv.URL, "default", "a", 5)
	appendLeaves(t, logSrv.URL, "acme", "a", 3)
	tick(t, a, "default", "acme")
	proc := exec.Command(svcBin, append(witnessArgs, "--every", "1")...)
	var procErr testkit.LockedBuffer
	proc.Stderr = &procErr
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Process.Kill(); proc.Wait() })
	sizeIs := func(path string, n uint64) func() bool {
		return func() bool { cp := tryCheckpoint(path); return cp != nil && cp.Head.TreeSize == n }
	}
	start := time.Now()
	waitFor(t, "the running witness to countersign sizes 5 and 3", 30*time.Second, func() bool {
		return sizeIs(filepath.Join(defOut, "latest.json"), 5)() && sizeIs(filepath.Join(acmeOut, "latest.json"), 3)()
	})
	appendLeaves(t, logSrv.URL, "default", "a", 4)
	tick(t, a, "default")
	waitFor(t, "the running witness to countersign size 9", 30*time.Second, sizeIs(filepath.Join(defOut, "latest.json"), 9))
	t.Logf("running witness countersigned two checkpoints in %s", time.Since(start).Round(time.Millisecond))
	if err := proc.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := proc.Wait(); err != nil {
		t.Fatalf("witness after SIGTERM: %v\n%s", err, procErr.String())
	}
	cp9 := readCheckpoint(t, filepath.Join(defOut, "9.json"))
	if n := len(cp9.File.Envelope.Signatures); n != 2 {
		t.Fatalf("countersigned checkpoint has %d signatures, want 2 (log and witness)", n)
	}
	for _, k := range []*signer.Key{logKey, wKey} {
		if _, err := cp9.File.Envelope.Verify([]signer.PublicKey{k.Public()}); err != nil {
			t.Fatalf("countersigned checkpoint lacks a valid signature by %s: %v", k.KeyID(), err)
		}
	}
	if cp9.File.Tenant != "default" || cp9.File.SignedAt == "" || readCheckpoint(t, filepath.Join(acmeOut, "3.json")).File.LogID != "acme-prod" {
		t.Fatalf("countersigned file form: %+v", cp9.File)
	}
	docData, err := os.ReadFile(filepath.Join(out, ".well-known", "svc-witness.json"))
	if err != nil {
		t.Fatal(err)
	}
	if doc, err := signer.ParseKeyDocument(docData); err != nil || doc.Keys[0].KeyID != wKey.KeyID() {
		t.Fatalf("witness key document: %v %s", err, docData)
	}
	if st := readState(t, filepath.Join(defOut, "state.json")); st.TreeSize != 9 || st.RootHash != cp9.Head.RootHash {
		t.Fatalf("witness state: %+v", st)
	}
	if !strings.Contains(procErr.String(), "outcome=countersigned") {
		t.Fatalf("no structured countersigned line on stderr:\n%s", procErr.String())
	}

	code, outText := logCheck("--json")
	var res monitor.Result
	if err := json.Unmarshal([]byte(outText[:strings.LastIndex(outText, "}")+1]), &res); err != nil || code != 0 || !res.OK || len(res.Checks) != 16 {
		t.Fatalf("log-check on a healthy, witnessed log: exit %d, %v\n%s", code, err, outText)
	}
	code, text := audit(filepath.Join(defOut, "5.json"), filepath.Join(defOut, "9.json"), "--witness-key", wPubPath)
	if code != 0 {
		t.Fatalf("audit --witness-key of two countersigned heads: exit %d\n%s", code, text)
	}
	wantLines("audit --witness-key", text, "PASS newer tree head countersigned by a witness")
	code, text = audit(filepath.Join(a.CheckpointDir, "default", "5.json"), filepath.Join(a.CheckpointDir, "default", "9.json"), "--witness-url", wSrv.URL)
	if code != 0 {
		t.Fatalf("audit --witness-url of the log's own checkpoints: exit %d\n%s", code, text)
	}
	code, o, e := runBin(t, "audit", "--older", filepath.Join(a.CheckpointDir, "acme", "3.json"), "--newer", filepath.Join(acmeOut, "3.json"),
		"--log-url", logSrv.URL+"/t/acme", "--log-id", "acme-prod", "--witness-url", wSrv.URL, "--tenant", "acme")
	if code != 0 {
		t.Fatalf("audit of tenant acme with --witness-url: exit %d\n%s%s", code, o, e)
	}

	// 2. A lagging checkpoint: the log grew and no checkpoint followed.
	appendLeaves(t, logSrv.URL, "default", "a", 2) // size 11; the checkpoint stays at 9
	waitFor(t, "log-check --max-lag 1 to fail on freshness", 20*time.Second, func() bool {
		code, text := logCheck("--max-lag", "1")
		return code == 1 && strings.Count("\n"+text, "\nFAIL ") == 1 && strings.Contains(text, "FAIL default checkpoint freshness: checkpoint lags")
	})
	if code, text := logCheck(); code != 0 {
		t.Fatalf("log-check with the default --max-lag: exit %d\n%s", code, text)
	}
	tick(t, a, "default")
	if code, errOut := once(); code != 0 {
		t.Fatalf("witness --once on normal growth: exit %d\n%s", code, errOut)
	}
	st11 := readState(t, filepath.Join(defOut, "state.json"))
	if st11.TreeSize != 11 {
		t.Fatalf("state after growth: %+v", st11)
	}

	// 3. (b) A fork at the same size: the operator signs a second root at size 11.
	forkRoot := merkle.LeafHash([]byte("another history")).String()
	forked := checkpointJSON(t, "default", "", 11, forkRoot, logKey)
	forkPath := filepath.Join(dir, "fork-11.json")
	os.WriteFile(forkPath, forked, 0o644)
	cpFront.serve("/default/latest.json", forked)
	if code, errOut := once(); code != 1 || !strings.Contains(errOut, "WITNESS ALARM") {
		t.Fatalf("witness --once on a fork: exit %d\n%s", code, errOut)
	}
	al := readAlarm(t, filepath.Join(defOut, "ALARM.json"))
	if al.Kind != witness.AlarmSecondHistory || al.Witnessed == nil || al.Witnessed.RootHash != st11.RootHash || al.Offered.RootHash != forkRoot || al.Offered.Envelope == nil {
		t.Fatalf("fork alarm: %+v", al)
	}
	if st := readState(t, filepath.Join(defOut, "state.json")); st.RootHash != st11.RootHash || st.TreeSize != 11 {
		t.Fatalf("the state moved on an alarm: %+v", st)
	}
	if n := len(alarmFiles(t, defOut)); n != 1 {
		t.Fatalf("%d ALARM-<time>.json files, want 1", n)
	}
	if code, _ := once(); code != 1 {
		t.Fatalf("witness --once while the fork persists: exit %d", code)
	}
	if n := len(alarmFiles(t, defOut)); n != 1 {
		t.Fatalf("a persisting refusal was recorded again: %d ALARM-<time>.json files", n)
	}
	logCheckFails("log-check after a fork alarm", "log-check after a fork", "FAIL default no alarm: the witness raised an alarm", "second-history", "PASS acme no alarm")
	code, text = audit(filepath.Join(defOut, "11.json"), forkPath, "--witness-key", wPubPath)
	if code != 1 {
		t.Fatalf("audit of a fork: exit %d\n%s", code, text)
	}
	wantLines("audit of a fork", text, "FAIL newer log extends older log", "FAIL newer tree head countersigned by a witness")
	cpFront.reset()
	os.Remove(filepath.Join(defOut, "ALARM.json")) // an operator who has read it
	if code, errOut := once(); code != 0 {
		t.Fatalf("witness --once after the fork went away: exit %d\n%s", code, errOut)
	}
	if code, text := logCheck(); code != 0 {
		t.Fatalf("log-check after the alarm was cleared: exit %d\n%s", code, text)
	}

	// 4. (c) A head signed by a key the log does not publish.
	appendLeaves(t, logSrv.URL, "default", "a", 3)
	tick(t, a, "default") // the real checkpoint at 14
	real14 := readCheckpoint(t, filepath.Join(a.CheckpointDir, "default", "14.json"))
	rogue, _ := signer.GenerateKey()
	rogueCP := checkpointJSON(t, "default", "", 14, real14.Head.RootHash, rogue)
	roguePath := filepath.Join(dir, "rogue-14.json")
	os.WriteFile(roguePath, rogueCP, 0o644)
	cpFront.serve("/default/latest.json", rogueCP)
	rogueHead, _ := receipt.SignTreeHead(rogue, 14, real14.Head.RootHash, time.Now(), "")
	rogueHeadJSON, _ := json.Marshal(map[string]any{"treeHead": rogueHead})
	front.serve("/head", rogueHeadJSON)
	if code, errOut := once(); code != 1 {
		t.Fatalf("witness --once on an unpublished key: exit %d\n%s", code, errOut)
	}
	al = readAlarm(t, filepath.Join(defOut, "ALARM.json"))
	if al.Kind != witness.AlarmUnpublishedKey || len(al.Evidence.UnpublishedKeyIDs) != 1 || al.Evidence.UnpublishedKeyIDs[0] != rogue.KeyID() || al.Evidence.KeyDocument == nil {
		t.Fatalf("unpublished-key alarm: %+v", al)
	}
	if st := readState(t, filepath.Join(defOut, "state.json")); st.TreeSize != 11 {
		t.Fatalf("the state moved on an alarm: %+v", st)
	}
	if n := len(alarmFiles(t, defOut)); n != 2 {
		t.Fatalf("%d ALARM-<time>.json files, want 2", n)
	}
	logCheckFails("log-check with a rogue key", "log-check with a rogue key", "FAIL default head signature", "FAIL default checkpoint signature", "FAIL default no alarm", "unpublished-key")
	code, text = audit(filepath.Join(defOut, "11.json"), roguePath, "--witness-key", wPubPath)
	if code != 1 {
		t.Fatalf("audit of a rogue head: exit %d\n%s", code, text)
	}
	wantLines("audit of a rogue head", text, "FAIL newer tree head signature")
	cpFront.reset()
	front.reset()
	os.Remove(filepath.Join(defOut, "ALARM.json"))
	if code, errOut := once(); code != 0 {
		t.Fatalf("witness --once after the rogue key went away: exit %d\n%s", code, errOut)
	}
	if st := readState(t, filepath.Join(defOut, "state.json")); st.TreeSize != 14 {
		t.Fatalf("state after the real checkpoint: %+v", st)
	}

	// 5. (a) The history rewritten: a second log with another history behind the same
	// URLs (same key, same tenants, larger trees that do not extend the first).
	b := startLog(t, filepath.Join(dir, "b"), logKey)
	front.set(b.Service.Handler())
	cpFront.set(http.FileServer(http.Dir(b.CheckpointDir)))
	appendLeaves(t, logSrv.URL, "default", "b", 20)
	appendLeaves(t, logSrv.URL, "acme", "b", 6)
	tick(t, b, "default", "acme")
	if code, errOut := once(); code != 1 {
		t.Fatalf("witness --once on a rewritten history: exit %d\n%s", code, errOut)
	}
	for _, c := range []struct {
		dir           string
		witnessed, to uint64
	}{{defOut, 14, 20}, {acmeOut, 3, 6}} {
		al := readAlarm(t, filepath.Join(c.dir, "ALARM.json"))
		if al.Kind != witness.AlarmDoesNotExtend || al.Witnessed.TreeSize != c.witnessed || al.Offered.TreeSize != c.to || al.Evidence.Consistency == nil {
			t.Fatalf("rewrite alarm in %s: %+v", c.dir, al)
		}
		if st := readState(t, filepath.Join(c.dir, "state.json")); st.TreeSize != c.witnessed {
			t.Fatalf("the state moved on an alarm: %+v", st)
		}
	}
	code, text = logCheck()
	if code != 1 {
		t.Fatalf("log-check on a rewritten history: exit %d\n%s", code, text)
	}
	t.Logf("log-check on a rewritten history:\n%s", text)
	if d, err := os.ReadFile(filepath.Join(defOut, "ALARM.json")); err == nil {
		t.Logf("ALARM.json:\n%s", d)
	}
	wantLines("log-check on a rewritten history", text, "FAIL default witness countersignature", "FAIL default no alarm", "does-not-extend", "FAIL acme no alarm")
	code, text = audit(filepath.Join(defOut, "14.json"), filepath.Join(b.CheckpointDir, "default", "20.json"), "--witness-key", wPubPath)
	if code != 1 {
		t.Fatalf("audit across the rewrite: exit %d\n%s", code, text)
	}
	wantLines("audit across the rewrite", text, "FAIL newer log extends older log", "FAIL newer tree head countersigned by a witness")
}
