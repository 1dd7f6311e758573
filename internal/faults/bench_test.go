package faults

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/internal/pgtest"
)

// benchResult is the part of `svc bench --json` this compares.
type benchResult struct {
	Transport  string
	Appends    int64
	Errors     int64
	Rate       float64
	P99        time.Duration
	Consistent bool
	ProofsOK   bool
}

// TestClusterVsSingle measures from outside (`svc bench append`, its own process)
// the same database-mode `svc log` process on a single JetStream node (R1) and on the
// 3-node cluster (R3), in turns within one run. `go tool task bench:cluster` runs
// it; it never runs in CI.
func TestClusterVsSingle(t *testing.T) {
	if os.Getenv("SVC_BENCH_CLUSTER") == "" {
		t.Skip("run with go tool task bench:cluster")
	}
	secs := soakEnv(t, "SVC_BENCH_DURATION", 10*time.Second)
	sig := startBenchSigner(t)
	setup := func(name string, nodes int) (natsURL, base string) {
		c := startCluster(t, nodes)
		env := []string{"TEST_DATABASE_URL=" + pgtest.New(t), "TEST_ADMIN_TOKEN=admin-token-456-0123456789abcdefghij", "TEST_SIGNER_TOKEN=signer-shared-token-123", "TEST_METRICS_TOKEN=" + metricsToken}
		p := startProc(t, name, env, "--db-env", "TEST_DATABASE_URL", "--nats-url", c.URLs(), "--replicas", fmt.Sprint(nodes),
			"--signer-url", "http://"+sig.addr, "--signer-token-env", "TEST_SIGNER_TOKEN", "--admin-token-env", "TEST_ADMIN_TOKEN", "--metrics-token-env", "TEST_METRICS_TOKEN")
		r := &rig{t: t, c: c}
		r.admin(env, "tenant", "plan", "default", "enterprise")
		return c.URLs(), p.Base()
	}
	single, singleBase := setup("single", 1)
	clustered, clusterBase := setup("cluster", 3)
	run := func(natsURL, base string) benchResult {
		cmd := exec.Command(svcPath, "bench", "append", "--url", base, "--nats-url", natsURL, "--via", "nats", "--tenant", "default",
			"--clients", "32", "--duration", secs.String(), "--json")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("svc bench: %v\n%s", err, stderr.String())
		}
		var rs []benchResult
		if err := json.Unmarshal(out, &rs); err != nil || len(rs) != 1 {
			t.Fatalf("svc bench output %s: %v", out, err)
		}
		if !rs[0].Consistent || !rs[0].ProofsOK || rs[0].Errors != 0 {
			t.Errorf("bench run not clean: %+v", rs[0])
		}
		return rs[0]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-8s %-14s %10s %10s\n", "round", "broker", "appends/s", "p99")
	var sum [2]float64
	for round := range 2 {
		for i, target := range []struct{ name, url, base string }{{"1 node R1", single, singleBase}, {"3 nodes R3", clustered, clusterBase}} {
			res := run(target.url, target.base)
			sum[i] += res.Rate
			fmt.Fprintf(&b, "%-8d %-14s %10.0f %10s\n", round+1, target.name, res.Rate, res.P99.Round(100*time.Microsecond))
		}
	}
	fmt.Fprintf(&b, "cluster/single throughput ratio: %.2f\n", sum[1]/sum[0])
	t.Log(b.String())
	fmt.Fprint(os.Stdout, b.String())
}
