package faults

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
)

// holders maps each tenant to the process holding its sequencer lease (nil: none of
// ours, or no lease).
func (r *rig) holders() map[string]*svcProc {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	out := map[string]*svcProc{}
	for tenant := range r.load.tokens {
		out[tenant] = nil
		pid, err := leaseHolder(ctx, r.js, tenant)
		if err != nil {
			continue
		}
		for _, p := range r.procs {
			if pid != 0 && p.pid() == pid {
				out[tenant] = p
			}
		}
	}
	return out
}

// spread returns nil once every process named holds at least one tenant and no
// process holds more than ceil(tenants / len(procs)).
func (r *rig) spreadOver(procs []*svcProc) error {
	h := r.holders()
	fair := (len(h) + len(procs) - 1) / len(procs)
	count := map[*svcProc]int{}
	for tenant, p := range h {
		if p == nil {
			return fmt.Errorf("tenant %s has no holder", tenant)
		}
		count[p]++
	}
	for _, p := range procs {
		if count[p] == 0 || count[p] > fair {
			return fmt.Errorf("%s holds %d tenants (fair share %d): %s", p.name, count[p], fair, describe(h))
		}
	}
	return nil
}

func describe(h map[string]*svcProc) string {
	var parts []string
	for tenant, p := range h {
		name := "-"
		if p != nil {
			name = p.name
		}
		parts = append(parts, tenant+"→"+name)
	}
	return strings.Join(parts, " ")
}

// checkSpread asserts that the tenants' sequencers spread over the processes, and
// that each process reports checkpoint gauges for the tenants it holds and for no
// other (a gauge of a tenant that moved away would go stale).
func (r *rig) checkSpread(within time.Duration) time.Duration {
	r.t.Helper()
	t0 := time.Now()
	testkit.Eventually(r.t, within, func() error { return r.spreadOver(r.procs) })
	took := time.Since(t0)
	testkit.Eventually(r.t, 20*time.Second, r.gaugesFollowHolders)
	return took
}

// gaugesFollowHolders checks /metrics of every process against the leases: the
// holder of a tenant reports svc_checkpoint_age_seconds{tenant} and no replica-tree
// lag for it; every other process the opposite.
func (r *rig) gaugesFollowHolders() error {
	h := r.holders()
	for _, p := range r.procs {
		fams, err := scrape(p.Base())
		if err != nil {
			return err
		}
		for tenant, holder := range h {
			cp := hasSeries(fams, "svc_checkpoint_age_seconds", "tenant", tenant)
			replica := hasSeries(fams, "svc_projection_lag_seconds", "consumer", pipeline.LeavesSubject(tenant))
			if holder == p && (!cp || replica) {
				return fmt.Errorf("%s holds %s: checkpoint gauge %v (want true), replica gauge %v (want false)", p.name, tenant, cp, replica)
			}
			if holder != p && cp {
				return fmt.Errorf("%s does not hold %s but reports its checkpoint gauge (%s)", p.name, tenant, describe(h))
			}
		}
	}
	return nil
}

// metricsToken is the --metrics-token-env of every svc log process the suite starts
// (a hosted log serves /metrics only to it).
const metricsToken = "metrics-token-of-the-fault-suite"

func scrape(base string) (map[string]*dto.MetricFamily, error) {
	if base == "" {
		return nil, fmt.Errorf("process down")
	}
	req, err := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+metricsToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

func hasSeries(fams map[string]*dto.MetricFamily, name, label, value string) bool {
	f := fams[name]
	if f == nil {
		return false
	}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == value {
				return true
			}
		}
	}
	return false
}

// moveAndReturn kills a process holding tenants with SIGKILL and keeps it down: its
// tenants must move to the survivor. Then it comes back: the survivor must hand it
// tenants again (the spread), and the gauges follow.
func (r *rig) moveAndReturn() {
	r.warm()
	victim := r.procs[1]
	survivor := r.procs[0]
	t0 := time.Now()
	if err := victim.signal(syscall.SIGKILL); err != nil {
		r.t.Fatal(err)
	}
	testkit.Eventually(r.t, 30*time.Second, func() error { return r.spreadOver([]*svcProc{survivor}) })
	moved := time.Since(t0)
	rec := r.load.waitRecovered(r.t, t0, 60*time.Second)
	r.record("kill -9 of "+victim.name+", kept down: its tenants move", rec, fmt.Sprintf("(all tenants held by %s after %s)", survivor.name, moved.Round(time.Millisecond)))
	t1 := time.Now()
	if err := victim.launch(); err != nil {
		r.t.Fatal(err)
	}
	spread := r.checkSpread(60 * time.Second)
	rec = r.load.waitRecovered(r.t, t1, 60*time.Second)
	r.record("  "+victim.name+" back: tenants spread again", rec, fmt.Sprintf("(spread %s after the restart; gauges follow the holders)", spread.Round(time.Millisecond)))
}
