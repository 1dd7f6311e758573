package monitor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/internal/logservice"

	"svc.dev/svc/internal/logserver"
	"svc.dev/svc/monitor"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
	"svc.dev/svc/witness"
)

type testLog struct {
	svc    *logservice.Service
	url    string
	cpURL  string
	logKey *signer.Key
}

func startLog(t *testing.T) *testLog {
	t.Helper()
	dir := t.TempDir()
	key, _ := signer.GenerateKey()
	doc := &signer.KeyDocument{Keys: []signer.KeyEntry{key.Public().Entry(time.Now().Add(-time.Hour), nil)}}
	cpDir := filepath.Join(dir, "checkpoints")
	svc, err := logservice.Start(context.Background(), logservice.Config{
		DataDir: filepath.Join(dir, "data"), Signer: receipt.KeySigner{Key: key},
		Keys: func(context.Context) (*signer.KeyDocument, error) { return doc, nil },
		Tenants: []logservice.TenantSpec{
			{ID: "default", TokenHashes: [][32]byte{logserver.HashToken("tok")}},
			{ID: "acme", LogID: "acme-prod", TokenHashes: [][32]byte{logserver.HashToken("tok")}},
		},
		CheckpointDir: cpDir, CheckpointEvery: time.Hour, NoSync: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ls := httptest.NewServer(svc.Handler())
	cs := httptest.NewServer(http.FileServer(http.Dir(cpDir)))
	t.Cleanup(func() { ls.Close(); cs.Close(); svc.Close() })
	return &testLog{svc: svc, url: ls.URL, cpURL: cs.URL, logKey: key}
}

func (l *testLog) grow(t *testing.T, tenant string, n int, tick bool) {
	t.Helper()
	path := "/append"
	if tenant != "default" {
		path = "/t/" + tenant + "/append"
	}
	for i := 0; i < n; i++ {
		req, _ := http.NewRequest("POST", l.url+path, strings.NewReader(fmt.Sprintf(`{"leaf":"leaf %d %d"}`, i, time.Now().UnixNano())))
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("append: %d", resp.StatusCode)
		}
	}
	if tick {
		if err := l.svc.Checkpointer(tenant).Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
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
	l.grow(t, "default", 5, true)
	l.grow(t, "acme", 3, true)
	out := t.TempDir()
	wKey, _ := signer.GenerateKey()
	w, err := witness.New(witness.Config{Key: wKey, LogURL: l.url, CheckpointsURL: l.cpURL, Out: out, Tenants: []string{"default", "acme"},
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
	opts := monitor.Options{LogURL: l.url, CheckpointsURL: l.cpURL, WitnessURL: ws.URL, Tenants: []string{"default", "acme"}}

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
			l.grow(t, "default", 1, true) // checkpoints at 6..11
		}
		l.grow(t, "default", 2, false) // size 13
		res, err := monitor.Run(ctx, monitor.Options{LogURL: l.url})
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
		res, err := monitor.Run(ctx, monitor.Options{LogURL: dead.URL, CheckpointsURL: l.cpURL})
		if err != nil || res.OK || len(res.Failed()) != 6 {
			t.Fatalf("%v %+v", err, res)
		}
	})
	t.Run("bad options", func(t *testing.T) {
		for _, o := range []monitor.Options{{LogURL: "ftp://x"}, {LogURL: l.url, Tenants: []string{"../x"}}, {LogURL: l.url, WitnessURL: "nope"}} {
			if _, err := monitor.Run(ctx, o); err == nil {
				t.Fatalf("accepted %+v", o)
			}
		}
	})
}
