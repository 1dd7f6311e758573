package witness_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
	"svc.dev/svc/witness"
)

// rig is a real log behind switchable fronts, for in-process witnesses.
type rig struct {
	log     *logtest.Log
	logKey  *signer.Key
	front   *switchable
	cpFront *switchable
	logURL  string
	cpURL   string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	key, _ := signer.GenerateKey()
	l := startLog(t, t.TempDir(), key)
	r := &rig{log: l, logKey: key, front: newSwitchable(l.Service.Handler()), cpFront: newSwitchable(http.FileServer(http.Dir(l.CheckpointDir)))}
	ls, cs := httptest.NewServer(r.front), httptest.NewServer(r.cpFront)
	t.Cleanup(func() { ls.Close(); cs.Close() })
	r.logURL, r.cpURL = ls.URL, cs.URL
	return r
}

func (r *rig) witness(t *testing.T, out string, now func() time.Time) (*witness.Witness, *signer.Key) {
	t.Helper()
	key, _ := signer.GenerateKey()
	w, err := witness.New(witness.Config{Key: key, LogURL: r.logURL, CheckpointsURL: r.cpURL, Out: out, Now: now, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w, key
}

func check(t *testing.T, w *witness.Witness, want witness.Outcome) witness.Result {
	t.Helper()
	r := w.Check(context.Background(), "default")
	if r.Outcome != want {
		t.Fatalf("outcome %s (err %v, alarm %+v), want %s", r.Outcome, r.Err, r.Alarm, want)
	}
	return r
}

func TestWitnessCycleDetails(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	appendLeaves(t, r.logURL, "default", "x", 4)
	tick(t, r.log, "default")
	fixed := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	out := t.TempDir()
	w, wKey := r.witness(t, out, func() time.Time { return fixed })
	dOut := filepath.Join(out, "default")

	t.Run("first head is countersigned", func(t *testing.T) {
		res := check(t, w, witness.Countersigned)
		if res.TreeSize != 4 {
			t.Fatalf("size %d", res.TreeSize)
		}
	})
	t.Run("unchanged, and republished after a crash between state and files", func(t *testing.T) {
		check(t, w, witness.Unchanged)
		os.Remove(filepath.Join(dOut, "latest.json"))
		os.Remove(filepath.Join(dOut, "4.json"))
		check(t, w, witness.Unchanged)
		cp := readCheckpoint(t, filepath.Join(dOut, "latest.json"))
		if len(cp.File.Envelope.VerifiedBy([]signer.PublicKey{wKey.Public(), r.logKey.Public()})) != 2 {
			t.Fatal("republished checkpoint lacks a signature")
		}
	})
	t.Run("a second witness on the same directory is refused", func(t *testing.T) {
		k, _ := signer.GenerateKey()
		_, err := witness.New(witness.Config{Key: k, LogURL: r.logURL, CheckpointsURL: r.cpURL, Out: out})
		if err == nil || !strings.Contains(err.Error(), "another witness") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("a heartbeat re-signature is countersigned again", func(t *testing.T) {
		cp := readCheckpoint(t, filepath.Join(r.log.CheckpointDir, "default", "4.json"))
		r.cpFront.serve("/default/latest.json", checkpointJSON(t, "default", "", 4, cp.Head.RootHash, r.logKey))
		defer r.cpFront.reset()
		check(t, w, witness.Countersigned)
		check(t, w, witness.Unchanged)
	})
	t.Run("a stale latest.json that is a prefix is unchanged", func(t *testing.T) {
		appendLeaves(t, r.logURL, "default", "x", 3)
		tick(t, r.log, "default")
		check(t, w, witness.Countersigned) // 7
		data, _ := os.ReadFile(filepath.Join(r.log.CheckpointDir, "default", "4.json"))
		r.cpFront.serve("/default/latest.json", data)
		defer r.cpFront.reset()
		check(t, w, witness.Unchanged)
		if st := readState(t, filepath.Join(dOut, "state.json")); st.TreeSize != 7 {
			t.Fatalf("state %d", st.TreeSize)
		}
	})
	t.Run("a smaller checkpoint from another history is an alarm", func(t *testing.T) {
		r.cpFront.serve("/default/latest.json", checkpointJSON(t, "default", "", 4, merkle.LeafHash([]byte("other")).String(), r.logKey))
		defer r.cpFront.reset()
		res := check(t, w, witness.Alarmed)
		if res.Alarm.Kind != witness.AlarmDoesNotExtend {
			t.Fatalf("kind %s", res.Alarm.Kind)
		}
	})
	t.Run("two alarms in one instant get two files", func(t *testing.T) {
		for _, s := range []string{"fork one", "fork two"} {
			r.cpFront.serve("/default/latest.json", checkpointJSON(t, "default", "", 7, merkle.LeafHash([]byte(s)).String(), r.logKey))
			check(t, w, witness.Alarmed)
		}
		r.cpFront.reset()
		files := alarmFiles(t, dOut)
		want := []string{"ALARM-20260102T030405.123456789Z.json", "ALARM-20260102T030405.123456789Z-2.json", "ALARM-20260102T030405.123456789Z-3.json"}
		if len(files) != 3 {
			t.Fatalf("alarm files %v, want %v", files, want)
		}
		for _, n := range want {
			if _, err := os.Stat(filepath.Join(dOut, n)); err != nil {
				t.Fatalf("%s: %v (have %v)", n, err, files)
			}
		}
		if a := readAlarm(t, filepath.Join(dOut, "ALARM.json")); a.Offered.RootHash != merkle.LeafHash([]byte("fork two")).String() {
			t.Fatalf("ALARM.json is not the latest alarm: %+v", a.Offered)
		}
		if st := readState(t, filepath.Join(dOut, "state.json")); st.TreeSize != 7 {
			t.Fatalf("state moved: %d", st.TreeSize)
		}
	})
	t.Run("a bad signature by a published key is an error, not an alarm", func(t *testing.T) {
		data := checkpointJSON(t, "default", "", 7, merkle.LeafHash([]byte("x")).String(), r.logKey)
		// Point the signature at another payload: same keyid, invalid signature.
		cp := readCheckpoint(t, filepath.Join(r.log.CheckpointDir, "default", "7.json"))
		good := cp.File.Envelope.Signatures[0].Sig
		forged, _ := client.ParseCheckpoint(data)
		forged.File.Envelope.Signatures[0].Sig = good
		r.cpFront.serve("/default/latest.json", mustJSON(t, forged.File))
		defer r.cpFront.reset()
		res := check(t, w, witness.Failed)
		if !strings.Contains(res.Err.Error(), "no signature verifies") {
			t.Fatal(res.Err)
		}
	})
	t.Run("another tenant's checkpoint is an error", func(t *testing.T) {
		cp := readCheckpoint(t, filepath.Join(r.log.CheckpointDir, "default", "7.json"))
		cp.File.Tenant = "acme"
		r.cpFront.serve("/default/latest.json", mustJSON(t, cp.File))
		defer r.cpFront.reset()
		check(t, w, witness.Failed)
	})
	t.Run("an unreachable log is an error", func(t *testing.T) {
		r.front.set(http.NotFoundHandler())
		defer r.front.set(r.log.Service.Handler())
		appendLeavesDirect(t, r, 1)
		tick(t, r.log, "default")
		res := check(t, w, witness.Failed)
		if !strings.Contains(res.Err.Error(), "404") {
			t.Fatal(res.Err)
		}
		if st := readState(t, filepath.Join(dOut, "state.json")); st.TreeSize != 7 {
			t.Fatalf("state moved: %d", st.TreeSize)
		}
	})
	t.Run("a log whose heads come to name it is followed under that name", func(t *testing.T) {
		// A log server upgraded to name every head's log (svc-log/<tenant> by
		// default): the witness followed heads naming no log; the first named head
		// that extends them is countersigned, and the name is kept from then on.
		cp := readCheckpoint(t, filepath.Join(r.log.CheckpointDir, "default", "8.json"))
		name := receipt.DefaultLogID("default")
		r.cpFront.serve("/default/latest.json", checkpointJSON(t, "default", name, 8, cp.Head.RootHash, r.logKey))
		check(t, w, witness.Countersigned)
		if st := readState(t, filepath.Join(dOut, "state.json")); st.LogID != name || st.TreeSize != 8 {
			t.Fatalf("state %+v, want size 8 of log %q", st, name)
		}
		for _, other := range []string{"", "svc-log/acme"} {
			r.cpFront.serve("/default/latest.json", checkpointJSON(t, "default", other, 8, cp.Head.RootHash, r.logKey))
			if res := check(t, w, witness.Failed); !strings.Contains(res.Err.Error(), "has been following log") {
				t.Fatalf("a head naming log %q after %q: %v", other, name, res.Err)
			}
		}
		r.cpFront.reset()
	})
	t.Run("the key document keeps a retired witness key", func(t *testing.T) {
		w.Close()
		k2, _ := signer.GenerateKey()
		w2, err := witness.New(witness.Config{Key: k2, LogURL: r.logURL, CheckpointsURL: r.cpURL, Out: out, Now: func() time.Time { return fixed.Add(time.Hour) }})
		if err != nil {
			t.Fatal(err)
		}
		defer w2.Close()
		data, _ := os.ReadFile(filepath.Join(out, ".well-known", "svc-witness.json"))
		doc, err := signer.ParseKeyDocument(data)
		if err != nil || len(doc.Keys) != 2 || doc.Keys[0].KeyID != k2.KeyID() || doc.Keys[1].KeyID != wKey.KeyID() || doc.Keys[1].ValidTo == "" {
			t.Fatalf("key document after rotation: %v\n%s", err, data)
		}
	})
}

// appendLeavesDirect appends through the log's own handler while the front is down.
func appendLeavesDirect(t *testing.T, r *rig, n int) {
	t.Helper()
	s := httptest.NewServer(r.log.Service.Handler())
	defer s.Close()
	appendLeaves(t, s.URL, "default", "direct", n)
}

// TestFetchTimesOut: an outbound fetch that gets no answer is cut off at ten seconds.
func TestFetchTimesOut(t *testing.T) {
	if testing.Short() {
		t.Skip("takes ten seconds")
	}
	t.Parallel()
	hang := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer s.Close()
	defer close(hang)
	start := time.Now()
	_, err := client.Fetch(context.Background(), nil, s.URL+"/default/latest.json", 1<<10, nil)
	took := time.Since(start)
	if err == nil || took < client.FetchTimeout-time.Second || took > client.FetchTimeout+3*time.Second {
		t.Fatalf("fetch from a silent server: %v after %s", err, took)
	}
}
