package telemetry_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"svc.dev/svc/internal/svcbin"
	"svc.dev/svc/internal/telemetry"
	"svc.dev/svc/internal/testkit"
)

var svcBin string

func TestMain(m *testing.M) { svcbin.Main(m, &svcBin) }

// startLog runs `svc log args...` as its own process on a free port and returns its
// base URL once it listens; the process is killed when the test ends.
func startLog(t *testing.T, env []string, args ...string) string {
	t.Helper()
	base, _ := startLogCmd(t, env, args...)
	return base
}

// startLogCmd is startLog that also returns the process.
func startLogCmd(t *testing.T, env []string, args ...string) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(svcBin, append([]string{"log", "--port", "0"}, args...)...)
	cmd.Env = append(cmd.Environ(), env...)
	addr := testkit.StartProcess(t, cmd, regexp.MustCompile(`msg="log server listening" addr=(\S+)`))
	return "http://" + addr, cmd
}

// scrape reads url's /metrics in Prometheus text form.
func scrape(t *testing.T, base, token string) map[string]*dto.MetricFamily {
	t.Helper()
	code, h, body := testkit.Do(t, http.MethodGet, base+"/metrics", token, "")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("GET /metrics: Content-Type %q, want the Prometheus text form", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("GET /metrics does not parse as Prometheus text: %v", err)
	}
	return fams
}

// sample finds the metric of family name whose labels include want ("k=v" pairs);
// nil when there is none.
func sample(fams map[string]*dto.MetricFamily, name string, want ...string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		for _, kv := range want {
			k, v, _ := strings.Cut(kv, "=")
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return m
	}
	return nil
}

// value is a counter's or gauge's value, or a histogram's count.
func value(fams map[string]*dto.MetricFamily, name string, want ...string) (float64, error) {
	m := sample(fams, name, want...)
	switch {
	case m == nil:
		return 0, fmt.Errorf("no %s%v in /metrics", name, want)
	case m.Counter != nil:
		return m.Counter.GetValue(), nil
	case m.Gauge != nil:
		return m.Gauge.GetValue(), nil
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount()), nil
	}
	return 0, fmt.Errorf("%s%v has no value", name, want)
}

// serveTelemetry sets up telemetry with its /metrics on a test server.
func serveTelemetry(t *testing.T) (*telemetry.Telemetry, string) {
	t.Helper()
	tel, err := telemetry.Setup(telemetry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	srv := httptest.NewServer(tel.Handler())
	t.Cleanup(srv.Close)
	return tel, srv.URL
}
