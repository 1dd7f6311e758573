package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"svc.dev/svc/internal/logservice"
	"svc.dev/svc/internal/pgtest"
	"svc.dev/svc/internal/testkit"
)

// tenantsConfig is what every size of bench:tenants shares.
type tenantsConfig struct {
	nodes   int // 1: the embedded broker; 3: a JetStream cluster, --replicas 3
	rssMax  int64
	perSize time.Duration // bound on one size's run
	busy    time.Duration // how long the busy tenant appends at 100/s
	// rounds, when set, alternates the busy tenant that many times between this size's
	// process and a peer of peerTenants tenants started beside it
	rounds int
	// quiet, when set, is how long after the creation the idle CPU is measured again
	// (past the process's quiet period, 10 min by default, every tenant has stopped)
	quiet  time.Duration
	signer *signerService
	dbURL  string
}

// tenantsRun is one size's run: the svc log process, where to reach it, and what
// the run learned.
type tenantsRun struct {
	t       *testing.T
	ctx     context.Context
	p       *svcProc
	nodes   *cluster // CLUSTER=1: the nats-server processes; nil on the embedded broker
	natsURL string
	hc      *http.Client
	n       int
	tokens  []string // tenant i's token
	busy    []string // the busy tenant's four tokens
	peak    atomic.Int64
	stopped atomic.Bool // by the watchdog
	// unavailable: the body of the last 503 an append got (what the restart's
	// 503s were, in the progress lines)
	unavailable atomic.Value
	// warm: the restart's appends made again at once
	warm  time.Duration
	began time.Time // the creation's start
}

const benchAdminToken = "admin-token-456-0123456789abcdefghij"

// benchNATSPassword is the embedded broker's password for gateways (and the bench).
const benchNATSPassword = "bench-nats-password-0123456789"

func runTenants(t *testing.T, cfg tenantsConfig, n int) tenantsRow {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.perSize)
	defer cancel()
	var peer *tenantsRun
	if cfg.rounds > 0 {
		// The floor: a process of its own with peerTenants tenants (its own database
		// and signer: the tenant names are the same), the busy tenant alternating
		// between the two.
		pc := cfg
		pc.dbURL, pc.signer = pgtest.New(t), startBenchSigner(t)
		var ok bool
		if peer, _, ok = startTenants(t, ctx, pc, peerTenants, "peer"); !ok {
			t.Fatal("the peer's tenants were not created")
		}
	}
	r, row, ok := startTenants(t, ctx, cfg, n, "log")
	if !ok {
		return row
	}
	time.Sleep(3 * time.Second) // let the creation's work settle
	row.rss = rss(r.p.pid())
	row.routines = r.goroutines()
	row.consumers = r.consumers()
	r.idle(&row)
	if cfg.quiet > 0 {
		r.idleAgain(&row, r.began.Add(cfg.quiet))
	}
	if peer != nil {
		row.note += alternate(r, peer, cfg.rounds, cfg.busy)
	}
	row.p99, row.busyErrs = r.busyRun(cfg.busy)
	progress("N=%d: idle RSS %d MiB, %d goroutines, %d consumers, %.0f%% of a core idle (nodes: %s); busy p99 %s", n, row.rss>>20, row.routines, row.consumers, 100*row.idleCPU, shares(row.nodesCPU), row.p99)
	var err error
	row.restart, row.restart5x, err = r.restart()
	if err != nil || r.stopped.Load() || r.ctx.Err() != nil {
		row.note += r.why(fmt.Sprintf(" during the restart: %v;", err))
	}
	row.note += r.exits()
	if r.warm > 0 {
		row.note += fmt.Sprintf(" the same appends again at once: %s;", r.warm.Round(10*time.Millisecond))
	}
	if err == nil && r.ctx.Err() == nil {
		row.note += r.floor() // tenantsfloor_test.go
	}
	row.note += fmt.Sprintf(" peak RSS %d MiB", r.peak.Load()>>20)
	return row
}

// peerTenants is the size of the floor the busy tenant is compared with (ROUNDS).
const peerTenants = 10

// startTenants starts a svc log process (name-n) and creates its n tenants; ok is
// false when that did not complete (row's note says why).
func startTenants(t *testing.T, ctx context.Context, cfg tenantsConfig, n int, name string) (*tenantsRun, tenantsRow, bool) {
	row := tenantsRow{broker: "embedded", tenants: 0}
	env := []string{"TEST_DATABASE_URL=" + cfg.dbURL, "TEST_ADMIN_TOKEN=" + benchAdminToken, "TEST_SIGNER_TOKEN=signer-shared-token-123", "TEST_METRICS_TOKEN=" + metricsToken}
	args := []string{"--db-env", "TEST_DATABASE_URL", "--signer-url", "http://" + cfg.signer.addr, "--signer-token-env", "TEST_SIGNER_TOKEN", "--admin-token-env", "TEST_ADMIN_TOKEN", "--metrics-token-env", "TEST_METRICS_TOKEN"}
	r := &tenantsRun{t: t, ctx: ctx, n: n, tokens: make([]string, n),
		hc: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	if cfg.nodes > 1 {
		row.broker = fmt.Sprintf("%d-node cluster", cfg.nodes)
		r.nodes = startCluster(t, cfg.nodes)
		r.natsURL = r.nodes.URLs()
		args = append(args, "--nats-url", r.natsURL, "--replicas", fmt.Sprint(cfg.nodes))
	} else {
		// The listener needs its nkey (issue 27); the bench reads the broker with the
		// password gateways use.
		seed := filepath.Join(t.TempDir(), "nats.nk")
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := kp.Seed()
		if err := os.WriteFile(seed, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		env = append(env, "TEST_NATS_LISTEN_PASSWORD="+benchNATSPassword)
		listen := fmt.Sprintf("127.0.0.1:%d", testkit.FreePorts(t, 1)[0])
		args = append(args, "--nats-listen", listen, "--nats-nkey", seed, "--nats-listen-password-env", "TEST_NATS_LISTEN_PASSWORD")
		r.natsURL = "nats://svc:" + benchNATSPassword + "@" + listen
	}
	if dir := os.Getenv("SVC_BENCH_CPUPROFILE"); dir != "" {
		// The restarted process's profile is what stays (the killed one's is cut
		// short and overwritten): its restart, then its stop.
		args = append(args, "--cpuprofile", filepath.Join(dir, fmt.Sprintf("log-%d.pprof", n)))
	}
	r.p = startProc(t, fmt.Sprintf("%s-%d", name, n), env, args...)
	ctx, stop := context.WithCancel(ctx) // ends with the caller's ctx
	r.ctx = ctx
	go r.watchdog(stop, cfg.rssMax)

	r.began = time.Now()
	done := r.create()
	row.tenants, row.created = done, time.Since(r.began)
	if r.stopped.Load() || done < n {
		row.note = r.why(fmt.Sprintf("created %d of %d;", done, n)) + r.exits()
		return r, row, false
	}
	return r, row, true
}

// exits notes the exits of the process the run did not cause (svcProc restarts it).
func (r *tenantsRun) exits() string {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	if r.p.exits == 0 {
		return ""
	}
	return fmt.Sprintf(" %d exits on its own, the last: %s;", r.p.exits, tail(r.p.reasons[len(r.p.reasons)-1], 160))
}

// why names what stopped the run.
func (r *tenantsRun) why(what string) string {
	if r.stopped.Load() {
		return fmt.Sprintf("watchdog: RSS passed the bound (peak %d MiB); %s", r.peak.Load()>>20, what)
	}
	if r.ctx.Err() != nil {
		return "time bound (SVC_BENCH_TENANTS_TIMEOUT) reached; " + what
	}
	return what
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stdout, "%s %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// watchdog samples the process's RSS twice a second; past max it kills the process
// (SIGKILL, not restarted) and stops the run.
func (r *tenantsRun) watchdog(stop context.CancelFunc, max int64) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-tick.C:
		}
		pid := r.p.pid()
		if pid == 0 {
			continue
		}
		v := rss(pid)
		if v > r.peak.Load() {
			r.peak.Store(v)
		}
		if v > max {
			progress("watchdog: RSS %d MiB passed the bound %d MiB; stopping", v>>20, max>>20)
			r.stopped.Store(true)
			stop()
			_ = r.p.signal(syscall.SIGKILL)
			return
		}
	}
}

// rss is pid's resident set in bytes (/proc/<pid>/status VmRSS), 0 if unknown.
func rss(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// cpuTicks is pid's user plus system time in clock ticks (/proc/<pid>/stat).
func cpuTicks(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return u + k
}

// idle measures the idle CPU of the svc log process and, with CLUSTER=1, of each
// nats-server node process, over the same 5 s.
func (r *tenantsRun) idle(row *tenantsRow) {
	pids := []int{r.p.pid()}
	if r.nodes != nil {
		pids = append(pids, r.nodes.pids()...)
	}
	use := cpuOver(pids, 5*time.Second)
	row.idleCPU, row.nodesCPU = use[0], use[1:]
}

// idleAgain waits until at, then measures the idle CPU again and counts the sequencer
// leases held, into row's note: tenants within their quiet period hold a lease
// (renewed every LeaseTTL/3) and a sequencer; past it, none.
func (r *tenantsRun) idleAgain(row *tenantsRow, at time.Time) {
	progress("N=%d: waiting %s for the tenants to go quiet", r.n, time.Until(at).Round(time.Second))
	select {
	case <-r.ctx.Done():
		return
	case <-time.After(time.Until(at)):
	}
	again := *row
	r.idle(&again)
	row.note += fmt.Sprintf(" idle again at %s: %.0f%% (nodes: %s), %d leases held;", at.UTC().Format("15:04:05"), 100*again.idleCPU, shares(again.nodesCPU), r.leases())
	progress("N=%d:%s", r.n, row.note)
}

// leases counts the sequencer leases held (keys of the lease bucket), -1 if unknown.
func (r *tenantsRun) leases() int {
	nc, err := nats.Connect(r.natsURL)
	if err != nil {
		return -1
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, logservice.LeaseBucket)
	if err != nil {
		return -1
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return -1
	}
	n := 0
	for range keys.Keys() {
		n++
	}
	return n
}

// cpuOver is the share of one core each of pids used over the same d (clock ticks
// at 100 Hz).
func cpuOver(pids []int, d time.Duration) []float64 {
	a := make([]int64, len(pids))
	for i, pid := range pids {
		a[i] = cpuTicks(pid)
	}
	t0 := time.Now()
	time.Sleep(d)
	out := make([]float64, len(pids))
	for i, pid := range pids {
		out[i] = float64(cpuTicks(pid)-a[i]) / 100 / time.Since(t0).Seconds()
	}
	return out
}

// shares prints shares of a core as percentages with their sum ("—" for none).
func shares(v []float64) string {
	if len(v) == 0 {
		return "—"
	}
	var sum float64
	parts := make([]string, len(v))
	for i, x := range v {
		sum += x
		parts[i] = fmt.Sprintf("%.0f", 100*x)
	}
	return fmt.Sprintf("%s = %.0f%%", strings.Join(parts, " + "), 100*sum)
}

// goroutines reads go_goroutines from the process's /metrics.
func (r *tenantsRun) goroutines() int {
	fams, err := scrape(r.p.Base())
	if err != nil || fams["go_goroutines"] == nil || len(fams["go_goroutines"].GetMetric()) == 0 {
		progress("goroutines: %v (no go_goroutines in /metrics)", err)
		return -1
	}
	return int(fams["go_goroutines"].GetMetric()[0].GetGauge().GetValue())
}

// consumers counts the consumers of every stream on the broker.
func (r *tenantsRun) consumers() int {
	nc, err := nats.Connect(r.natsURL)
	if err != nil {
		progress("consumers: %v", err)
		return -1
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	n := 0
	l := js.ListStreams(ctx)
	for si := range l.Info() {
		n += si.State.Consumers
	}
	if l.Err() != nil {
		progress("consumers: %v", l.Err())
	}
	return n
}

// admin calls the admin API; out, if not nil, receives the JSON answer.
func (r *tenantsRun) admin(path string, body, out any) error {
	data, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(r.ctx, http.MethodPost, r.p.Base()+path, bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer "+benchAdminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	ans, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %d %s", path, resp.StatusCode, ans)
	}
	if out != nil {
		return json.Unmarshal(ans, out)
	}
	return nil
}

// appendOne appends leaf for tenant; the status code (0: no answer) and latency.
func (r *tenantsRun) appendOne(tenant, token, leaf string) (int, time.Duration) {
	body, _ := json.Marshal(map[string]string{"leaf": leaf})
	t0 := time.Now()
	base := r.p.Base()
	if base == "" {
		return 0, 0
	}
	req, _ := http.NewRequestWithContext(r.ctx, http.MethodPost, base+"/t/"+tenant+"/append", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.hc.Do(req)
	if err != nil {
		return 0, time.Since(t0)
	}
	ans, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		r.unavailable.Store(tenant + ": " + tail(string(ans), 300))
	}
	return resp.StatusCode, time.Since(t0)
}

func tenantID(i int) string { return fmt.Sprintf("t%05d", i) }

// parallel runs f(i) for i in [0, n) over w workers, stopping when the run does.
func (r *tenantsRun) parallel(n, w int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r.ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
}

// every runs f every d until stop is closed.
func every(d time.Duration, stop <-chan struct{}, f func()) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			f()
		}
	}
}
