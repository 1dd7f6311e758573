package faults

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/internal/pgtest"
	"svc.dev/svc/signer"
	"svc.dev/svc/signer/remote"
)

// tenantsRow is one line of the bench:tenants table.
type tenantsRow struct {
	broker    string
	tenants   int           // created (fewer than asked when the watchdog stopped the run)
	created   time.Duration // creating them all (admin API, a token and one append each)
	rss       int64         // bytes, the svc log process (embedded broker included) once idle
	routines  int           // go_goroutines of the svc log process
	consumers int           // consumers on every stream of the broker
	idleCPU   float64       // share of a core the svc log process used over 5 idle seconds
	nodesCPU  []float64     // CLUSTER=1: each nats-server node process's share over the same 5 s
	restart   time.Duration // kill -9 to every tenant appending again
	restart5x int           // appends answered 503 during that
	p99       time.Duration // the busy tenant's p99 at 100 appends/s over four tokens
	busyErrs  int           // the busy tenant's appends not answered 200
	note      string        // why the row is incomplete, if it is
}

// TestTenants is `go tool task bench:tenants`: one database-mode `svc log` process
// (on its embedded broker, or with CLUSTER=1 on a 3-node JetStream cluster with
// --replicas 3) given N tenants through the admin API from this process, each with a
// token and one append, then measured from outside: RSS, goroutines, broker
// consumers, idle CPU, kill -9 and restart to every tenant appending, and the p99 of
// a busy tenant at 100 appends/s over four tokens. A watchdog stops a size whose RSS
// passes SVC_BENCH_RSS_MAX. It never runs in CI. With CLUSTER=1 the three JetStream
// nodes are nats-server processes of their own (startCluster, as the fault suite's):
// RSS and goroutines are the svc log process's alone, and the idle CPU column adds
// each node's share, read from its /proc/<pid>/stat over the same 5 s.
func TestTenants(t *testing.T) {
	spec := os.Getenv("SVC_BENCH_TENANTS")
	if spec == "" {
		t.Skip("run with go tool task bench:tenants (SVC_BENCH_TENANTS=10,1000,10000)")
	}
	var sizes []int
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 100000 {
			t.Fatalf("SVC_BENCH_TENANTS=%q: want tenant counts from 1 to 100000, comma-separated", spec)
		}
		sizes = append(sizes, n)
	}
	cfg := tenantsConfig{
		nodes:   1,
		rssMax:  envBytes(t, "SVC_BENCH_RSS_MAX", 8<<30),
		perSize: soakEnv(t, "SVC_BENCH_TENANTS_TIMEOUT", 20*time.Minute),
		busy:    soakEnv(t, "SVC_BENCH_BUSY", 10*time.Second),
	}
	if v := os.Getenv("SVC_BENCH_ROUNDS"); v != "" {
		if cfg.rounds, _ = strconv.Atoi(v); cfg.rounds < 1 || cfg.rounds > 100 {
			t.Fatalf("SVC_BENCH_ROUNDS=%q: want 1 to 100 rounds", v)
		}
	}
	if os.Getenv("SVC_BENCH_QUIET") != "" {
		cfg.quiet = soakEnv(t, "SVC_BENCH_QUIET", 0)
	}
	if os.Getenv("SVC_BENCH_TENANTS_CLUSTER") != "" {
		cfg.nodes = 3
	}
	var rows []tenantsRow
	for _, n := range sizes {
		var row tenantsRow
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			cfg.dbURL = pgtest.New(t)
			// A signer of its own per size: it remembers the last head of each log, and
			// the sizes' logs share tenant names (t00000 ...) but not histories.
			cfg.signer = startBenchSigner(t)
			row = runTenants(t, cfg, n)
		})
		rows = append(rows, row)
		printTenants(rows)
		if row.note != "" && strings.HasPrefix(row.note, "watchdog") {
			break // a larger size would only pass the bound sooner
		}
	}
}

// envBytes reads a size in bytes, or with a suffix of GiB or MiB, from the environment.
func envBytes(t *testing.T, name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	mult := int64(1)
	switch {
	case strings.HasSuffix(v, "GiB"):
		mult, v = 1<<30, strings.TrimSuffix(v, "GiB")
	case strings.HasSuffix(v, "MiB"):
		mult, v = 1<<20, strings.TrimSuffix(v, "MiB")
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a size such as 8GiB", name, os.Getenv(name))
	}
	return n * mult
}

// printTenants writes the table so far to stdout (the task's output).
func printTenants(rows []tenantsRow) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n| broker | tenants | created in | RSS | goroutines | consumers | idle CPU | nodes' idle CPU | restart to every tenant appending | busy tenant p99 | note |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		restart := "—"
		if r.restart > 0 {
			restart = r.restart.Round(10 * time.Millisecond).String()
			if r.restart5x > 0 {
				restart += fmt.Sprintf(" (%d × 503)", r.restart5x)
			}
		}
		p99 := "—"
		if r.p99 > 0 {
			p99 = r.p99.Round(100 * time.Microsecond).String()
			if r.busyErrs > 0 {
				p99 += fmt.Sprintf(" (%d not 200)", r.busyErrs)
			}
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %.0f MiB | %d | %d | %.0f%% | %s | %s | %s | %s |\n", r.broker, r.tenants, r.created.Round(100*time.Millisecond),
			float64(r.rss)/(1<<20), r.routines, r.consumers, 100*r.idleCPU, shares(r.nodesCPU), restart, p99, r.note)
	}
	fmt.Fprint(os.Stdout, b.String())
}

// startBenchSigner starts a signer with a fresh head store, stopped with t.
func startBenchSigner(t *testing.T) *signerService {
	key, _ := signer.GenerateKey()
	heads, err := remote.OpenHeadStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h, err := remote.NewServer(remote.ServerConfig{Key: key, Token: "signer-shared-token-123", ValidFrom: time.Now().Add(-time.Hour), Logger: slog.New(slog.DiscardHandler), Heads: heads})
	if err != nil {
		t.Fatal(err)
	}
	sg := &signerService{h: h}
	sg.start(t)
	t.Cleanup(sg.stop)
	return sg
}
