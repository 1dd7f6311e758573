package telemetry_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/signer"
)

// TestMetricsOfARunningLog: a real `svc log` process, appended to over HTTP, counts
// in /metrics exactly what happened: appends by status, refusals by reason, leaves
// committed (a repeated leaf gets no new index), batches, the projections' positions
// and the checkpoint.
func TestMetricsOfARunningLog(t *testing.T) {
	dir := t.TempDir()
	key, err := signer.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	keyPath, _, err := key.WriteKeyFiles(dir, "log")
	if err != nil {
		t.Fatal(err)
	}
	const token, metricsToken = "append-token-0123456789", "metrics-token-0123456789"
	base := startLog(t, []string{"T_TOKEN=" + token, "T_METRICS=" + metricsToken},
		"--file", filepath.Join(dir, "log.jsonl"), "--key", keyPath, "--data", filepath.Join(dir, "data"),
		"--token-env", "T_TOKEN", "--metrics-token-env", "T_METRICS", "--checkpoint-every", "1")

	// /metrics wants its own token.
	for _, tok := range []string{"", token} {
		code, _, _ := testkit.Do(t, http.MethodGet, base+"/metrics", tok, "")
		if code != http.StatusUnauthorized {
			t.Fatalf("GET /metrics with token %q: %d, want 401", tok, code)
		}
	}

	const n = 25
	for i := range n {
		code, _, body := testkit.Do(t, http.MethodPost, base+"/append", token, leafHash(i+1))
		if code != http.StatusOK {
			t.Fatalf("append %d: %d %s", i, code, body)
		}
	}
	// A repeat of leaf 1: answered with its index, no new leaf.
	if code, _, body := testkit.Do(t, http.MethodPost, base+"/append", token, leafHash(1)); code != http.StatusOK {
		t.Fatalf("repeated append: %d %s", code, body)
	}
	if code, _, _ := testkit.Do(t, http.MethodPost, base+"/append", token, `{"leafHash":"zz"}`); code != http.StatusBadRequest {
		t.Fatalf("bad append: %d, want 400", code)
	}
	if code, _, _ := testkit.Do(t, http.MethodPost, base+"/append", "wrong-token", `{"leafHash":"zz"}`); code != http.StatusUnauthorized {
		t.Fatalf("append with a wrong token: %d, want 401", code)
	}
	if code, _, _ := testkit.Do(t, http.MethodGet, base+"/head", "", ""); code != http.StatusOK {
		t.Fatalf("GET /head: %d", code)
	}

	exact := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"svc_http_requests_total", []string{"route=POST /append", "status=200"}, n + 1},
		{"svc_http_requests_total", []string{"route=POST /append", "status=400"}, 1},
		{"svc_http_requests_total", []string{"route=POST /append", "status=401"}, 1},
		{"svc_http_requests_total", []string{"route=GET /head", "status=200"}, 1},
		{"svc_append_duration_seconds", []string{"status=200"}, n + 1}, // histogram count
		{"svc_append_refusals_total", []string{"reason=invalid"}, 1},
		{"svc_append_refusals_total", []string{"reason=unauthorized"}, 1},
		{"svc_sequencer_leaves_total", nil, n},
		{"svc_sequencer_pending", []string{"tenant=default"}, 0},
		{"svc_projection_position", []string{"consumer=logfile/default"}, 0}, // > 0, below
		{"svc_projection_lag_seconds", []string{"consumer=logfile/default"}, 0},
		{"svc_projection_lag_seconds", []string{"consumer=metering"}, 0},
		{"svc_checkpoint_lag", []string{"tenant=default"}, 0},
	}
	testkit.Eventually(t, 20*time.Second, func() error {
		fams := scrape(t, base, metricsToken)
		for _, c := range exact {
			got, err := value(fams, c.name, c.labels...)
			if err != nil {
				return err
			}
			if c.name == "svc_projection_position" {
				if got < 1 {
					return fmt.Errorf("%s%v = %v, want a stream sequence", c.name, c.labels, got)
				}
				continue
			}
			if got != c.want {
				return fmt.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
			}
		}
		// Every request went through some batch: the batch sizes add up to the requests
		// that reached the sequencer (n fresh + 1 repeat).
		bs := sample(fams, "svc_sequencer_batch_size", nil...)
		if bs == nil || bs.Histogram.GetSampleSum() != n+1 {
			return fmt.Errorf("svc_sequencer_batch_size sum = %v, want %d", bs.GetHistogram().GetSampleSum(), n+1)
		}
		if got, err := value(fams, "svc_checkpoint_age_seconds", "tenant=default"); err != nil || got < 0 || got > 10 {
			return fmt.Errorf("svc_checkpoint_age_seconds = %v (%v), want 0..10", got, err)
		}
		return nil
	})

	// The histogram's buckets are those of docs/design/telemetry.md.
	h := sample(scrape(t, base, metricsToken), "svc_append_duration_seconds", "status=200").GetHistogram()
	if len(h.GetBucket()) < 10 || h.GetBucket()[0].GetUpperBound() != 0.0002 {
		t.Errorf("append latency buckets %v, want 0.0002 s and up", h.GetBucket())
	}
}

// TestMetricsOff: --metrics=false serves no /metrics (the log's 404 answers it).
func TestMetricsOff(t *testing.T) {
	dir := t.TempDir()
	key, _ := signer.GenerateKey()
	keyPath, _, err := key.WriteKeyFiles(dir, "log")
	if err != nil {
		t.Fatal(err)
	}
	base := startLog(t, nil, "--file", filepath.Join(dir, "log.jsonl"), "--key", keyPath, "--data", filepath.Join(dir, "data"), "--metrics=false")
	if code, _, body := testkit.Do(t, http.MethodGet, base+"/metrics", "", ""); code != http.StatusNotFound {
		t.Fatalf("GET /metrics with --metrics=false: %d %s, want 404", code, body)
	}
}

// leafHash is an append body of a distinct leaf hash (SHA-256 of i: hashes that share
// their first 8 bytes would defeat the sequencer's recent-leaf index, which keys on them).
func leafHash(i int) string {
	h := sha256.Sum256([]byte(strconv.Itoa(i)))
	return fmt.Sprintf(`{"leafHash":"%x"}`, h)
}

// TestTelemetryFlagErrors: bad telemetry flags stop svc log before it serves, saying
// what to fix.
func TestTelemetryFlagErrors(t *testing.T) {
	dir := t.TempDir()
	key, _ := signer.GenerateKey()
	keyPath, _, err := key.WriteKeyFiles(dir, "log")
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"log", "--file", filepath.Join(dir, "log.jsonl"), "--key", keyPath, "--data", filepath.Join(dir, "data"), "--port", "0"}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--otlp-metrics", "collector:4318"}, 1, "want an http(s) URL"},
		{[]string{"--metrics=false", "--otlp-traces", "http://collector:4318/v1/traces"}, 2, "drop --otlp-metrics, --otlp-traces and --metrics-token-env"},
		{[]string{"--metrics-token-env", "SVC_TEST_UNSET_METRICS_TOKEN"}, 1, "SVC_TEST_UNSET_METRICS_TOKEN (named by --metrics-token-env) is not set"},
	} {
		out, err := exec.Command(svcBin, append(base, c.args...)...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != c.code || !strings.Contains(string(out), c.want) {
			t.Errorf("svc log %v: %v, want exit %d saying %q:\n%s", c.args, err, c.code, c.want, out)
		}
	}
}
