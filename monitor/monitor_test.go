package monitor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/monitor"
	"svc.dev/svc/signer"
	"svc.dev/svc/witness"
)

// startLog runs a real log service with tenants default and acme (token "tok").
func startLog(t *testing.T) *logtest.Log {
	return logtest.Start(t, logtest.Options{Tenants: []logtest.Tenant{
		{ID: "default", Token: "tok"}, {ID: "acme", LogID: "acme-prod", Token: "tok"},
	}})
}

// grow appends n leaves to tenant and, with tick, publishes a checkpoint.
func grow(t *testing.T, l *logtest.Log, tenant string, n int, tick bool) {
	t.Helper()
	l.Grow(t, tenant, "leaf", n)
	if tick {
		l.Checkpoint(t, tenant)
	}
}

func failed(r *monitor.Result) []string {
	var out []string
	for _, c := range r.Failed() {
		out = append(out, c.Tenant+" "+c.Name)
	}
	return out
}

func TestProbe(t *testing.T) {
	l := startLog(t)
	grow(t, l, "default", 5, true)
	grow(t, l, "acme", 3, true)
	out := t.TempDir()
	wKey, _ := signer.GenerateKey()
	w, err := witness.New(witness.Config{Key: wKey, LogURL: l.URL, CheckpointsURL: l.CheckpointsURL, Out: out, Tenants: []string{"default", "acme"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, r := range w.Cycle(context.Background()) {
		if !r.OK() {
			t.Fatalf("witness: %+v", r)
		}
	}
	ws := httptest.NewServer(http.FileServer(http.Dir(out)))
	defer ws.Close()
	ctx := context.Background()
	opts := monitor.Options{LogURL: l.URL, CheckpointsURL: l.CheckpointsURL, WitnessURL: ws.URL, Tenants: []string{"default", "acme"}}

	t.Run("healthy and witnessed", func(t *testing.T) {
		res, err := monitor.Run(ctx, opts)
		if err != nil || !res.OK || len(res.Checks) != 16 {
			t.Fatalf("%v %v", err, res)
		}
		want := []string{monitor.CheckHealth, monitor.CheckKeyDocument, monitor.CheckHeadSignature, monitor.CheckCheckpointSignature,
			monitor.CheckCheckpointFreshness, monitor.CheckCheckpointConsistent, monitor.CheckWitnessCountersignature, monitor.CheckNoAlarm}
		for i, c := range res.Checks {
			if c.Name != want[i%8] || c.Tenant != []string{"default", "acme"}[i/8] {
				t.Fatalf("check %d is %s %s", i, c.Tenant, c.Name)
			}
		}
		var text bytes.Buffer
		res.WriteText(&text)
		if !strings.HasPrefix(text.String(), "PASS default health: ") || !strings.HasSuffix(text.String(), "RESULT: OK (16 checks passed)\n") {
			t.Fatalf("text:\n%s", text.String())
		}
	})
	t.Run("JSON shape", func(t *testing.T) {
		res := &monitor.Result{OK: false, Checks: []monitor.Check{{Tenant: "default", Name: "health", OK: true}, {Tenant: "acme", Name: "no alarm", Detail: "x"}}}
		var b bytes.Buffer
		res.WriteJSON(&b)
		var generic map[string]any
		json.Unmarshal(b.Bytes(), &generic)
		got, _ := json.Marshal(generic)
		if string(got) != `{"checks":[{"name":"health","ok":true,"tenant":"default"},{"detail":"x","name":"no alarm","ok":false,"tenant":"acme"}],"ok":false}` {
			t.Fatalf("JSON form: %s", got)
		}
	})
	t.Run("checkpoints from the API when no checkpoints URL is given", func(t *testing.T) {
		for i := 0; i < 6; i++ {
			grow(t, l, "default", 1, true) // checkpoints at 6..11
		}
		grow(t, l, "default", 2, false) // size 13
		res, err := monitor.Run(ctx, monitor.Options{LogURL: l.URL})
		if err != nil || !res.OK {
			t.Fatalf("%v %v", err, failed(res))
		}
		if d := res.Checks[3].Detail; !strings.HasPrefix(d, "size 11 ") {
			t.Fatalf("latest checkpoint from /checkpoints: %s", d)
		}
	})
	t.Run("freshness", func(t *testing.T) {
		// default has grown past its last checkpoint (13 > 11); acme has not.
		at := func(d time.Duration) func() time.Time { return func() time.Time { return time.Now().Add(d) } }
		for _, c := range []struct {
			now     func() time.Time
			maxLag  time.Duration
			failing []string
		}{
			{at(0), 0, nil},
			{at(2 * time.Second), time.Second, []string{"default checkpoint freshness"}},
			{at(2 * time.Hour), 0, []string{"default checkpoint freshness"}},
			{at(2 * time.Hour), 3 * time.Hour, nil},
			{at(25 * time.Hour), 30 * time.Hour, []string{"acme checkpoint freshness"}},
			{at(-time.Hour), 0, []string{"default checkpoint freshness", "acme checkpoint freshness"}},
		} {
			o := opts
			o.Now, o.MaxLag = c.now, c.maxLag
			res, err := monitor.Run(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			if got := failed(res); strings.Join(got, ",") != strings.Join(c.failing, ",") {
				t.Fatalf("max-lag %s: failing %v, want %v", c.maxLag, got, c.failing)
			}
		}
	})
	t.Run("a log that does not answer", func(t *testing.T) {
		dead := httptest.NewServer(http.NotFoundHandler())
		dead.Close()
		res, err := monitor.Run(ctx, monitor.Options{LogURL: dead.URL, CheckpointsURL: l.CheckpointsURL})
		if err != nil || res.OK || len(res.Failed()) != 6 {
			t.Fatalf("%v %+v", err, res)
		}
	})
	t.Run("bad options", func(t *testing.T) {
		for _, o := range []monitor.Options{{LogURL: "ftp://x"}, {LogURL: l.URL, Tenants: []string{"../x"}}, {LogURL: l.URL, WitnessURL: "nope"}} {
			if _, err := monitor.Run(ctx, o); err == nil {
				t.Fatalf("accepted %+v", o)
			}
		}
	})
}
