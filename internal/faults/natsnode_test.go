package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/testkit"
)

// natsServerPath is nats-server built by TestMain from the version go.mod requires.
var natsServerPath string

// buildNATSServer builds github.com/nats-io/nats-server/v2 (go.mod's version) into dir.
func buildNATSServer(dir string) (string, error) {
	path := filepath.Join(dir, "nats-server")
	if out, err := exec.Command("go", "build", "-o", path, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build nats-server: %w\n%s", err, out)
	}
	return path, nil
}

// cluster is a JetStream cluster of real nats-server processes on 127.0.0.1, so a
// node can be killed with SIGKILL, paused with SIGSTOP, or cut off. Every route runs
// through a testkit.Proxy of its own (node i dials node j through links[i][j]), and
// each node advertises a dead end as its route address, so no node learns a way
// around the proxies: black-holing a node's links partitions it from its peers while
// its clients stay connected. Client ports are picked at the first start and kept, so
// a node that comes back is reached at the URLs the svc processes were given.
type cluster struct {
	t     testing.TB
	mu    sync.Mutex
	n     int
	ports []int    // client ports
	dirs  []string // store directories (kept across restarts)
	confs []string
	cmds  []*exec.Cmd
	dones []chan struct{}
	logs  []*testkit.LockedBuffer
	links map[[2]int]*testkit.Proxy
	nc    *nats.Conn // the test's own connection, for leaderOf
}

func startCluster(t testing.TB, n int) *cluster {
	t.Helper()
	c := &cluster{t: t, n: n}
	// Pings every second: the test's own view of the cluster moves off a paused node.
	c.nc = testkit.BootCluster(t, c, n, 60*time.Second, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.PingInterval(time.Second), nats.MaxPingsOutstanding(2))
	return c
}

// Start writes the n nodes' configuration files with fresh ports and links and
// starts every node (testkit.ClusterNodes). The ports are chosen before the nodes
// listen (each node's routes name the others'), so a test running beside this one
// can take one in between: a node that cannot listen never becomes ready, and
// testkit.BootCluster starts the whole cluster again on new ports.
func (c *cluster) Start(_ testing.TB, n int) error {
	c.configure(n)
	return c.startAll()
}

// Stop kills every node that runs (testkit.ClusterNodes).
func (c *cluster) Stop() { c.stopAll() }

// configure writes the n nodes' configuration files with fresh ports and links.
func (c *cluster) configure(n int) {
	c.t.Helper()
	clients := testkit.FreePorts(c.t, n)
	routes := testkit.FreePorts(c.t, n)
	dead := testkit.StartProxy(c.t, "127.0.0.1:1")
	dead.SetCut(true) // accepts and closes: the advertised route address leads nowhere
	c.ports, c.dirs, c.confs, c.links = clients, nil, nil, map[[2]int]*testkit.Proxy{}
	c.cmds, c.dones, c.logs = make([]*exec.Cmd, n), make([]chan struct{}, n), make([]*testkit.LockedBuffer, n)
	dir := c.t.TempDir()
	for i := range n {
		var links []string
		for j := range n {
			if j == i {
				continue
			}
			l := testkit.StartProxy(c.t, fmt.Sprintf("127.0.0.1:%d", routes[j]))
			c.links[[2]int{i, j}] = l
			links = append(links, "nats-route://"+l.Addr())
		}
		store := filepath.Join(dir, fmt.Sprintf("n%d", i))
		// As deploy/nats/*.conf: fsync every write (sync_interval: always).
		conf := fmt.Sprintf("server_name: n%d\nlisten: 127.0.0.1:%d\nmax_payload: 1MB\n"+
			"jetstream { store_dir: %q, sync_interval: always }\n", i, clients[i], store)
		if n > 1 {
			conf += fmt.Sprintf("cluster { name: svc, listen: 127.0.0.1:%d, advertise: %q, no_advertise: true, routes: [%s] }\n",
				routes[i], dead.Addr(), strings.Join(links, ", "))
		}
		path := filepath.Join(dir, fmt.Sprintf("n%d.conf", i))
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			c.t.Fatal(err)
		}
		c.dirs, c.confs = append(c.dirs, store), append(c.confs, path)
	}
	// Registered after the store directories: cleanups run last first, so the nodes
	// stop before their directories are removed.
	c.t.Cleanup(c.stopAll)
}

// stopAll kills every node that runs.
func (c *cluster) stopAll() {
	for i := range c.cmds {
		c.kill9(i)
	}
}

// startAll starts every node, stopping at the first that does not listen.
func (c *cluster) startAll() error {
	for i := range c.confs {
		if err := c.tryStart(i); err != nil {
			return err
		}
	}
	return nil
}

// start starts node i again (after kill9), failing the test if it does not listen.
func (c *cluster) start(i int) {
	c.t.Helper()
	if err := c.tryStart(i); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) tryStart(i int) error {
	cmd := exec.Command(natsServerPath, "-c", c.confs[i])
	log := &testkit.LockedBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("nats node %d: %w", i, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c.mu.Lock()
	c.cmds[i], c.dones[i], c.logs[i] = cmd, done, log
	c.mu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", c.ports[i]), time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("nats node %d exited: %s", i, tail(log.String(), 2000))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.kill9(i)
			return fmt.Errorf("nats node %d did not listen within 20 s (client port %d taken?): %s", i, c.ports[i], tail(log.String(), 2000))
		}
	}
}

// kill9 kills node i with SIGKILL (a crash: no leadership handed over) and waits for
// it to be gone. It is a no-op on a node that is down.
func (c *cluster) kill9(i int) {
	c.mu.Lock()
	cmd, done := c.cmds[i], c.dones[i]
	c.cmds[i] = nil
	c.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGCONT) // a paused node dies too
		_ = cmd.Process.Kill()
		<-done
	}
}

// pids are the running nodes' process ids (a node that is down is left out).
func (c *cluster) pids() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for _, cmd := range c.cmds {
		if cmd != nil {
			out = append(out, cmd.Process.Pid)
		}
	}
	return out
}

// pause stops node i with SIGSTOP (a hung machine: its connections stay open but
// nothing answers); resume continues it.
func (c *cluster) pause(i int)  { c.signal(i, syscall.SIGSTOP) }
func (c *cluster) resume(i int) { c.signal(i, syscall.SIGCONT) }

func (c *cluster) signal(i int, sig syscall.Signal) {
	c.mu.Lock()
	cmd := c.cmds[i]
	c.mu.Unlock()
	if cmd == nil {
		c.t.Fatalf("nats node %d is down", i)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		c.t.Fatal(err)
	}
}

// isolate black-holes (true) or heals (false) every route of node i: a partition
// that leaves node i alone, its clients still connected to it.
func (c *cluster) isolate(i int, cut bool) {
	for k, l := range c.links {
		if k[0] == i || k[1] == i {
			l.SetBlackhole(cut)
		}
	}
}

// storeDir is node i's JetStream store directory.
func (c *cluster) storeDir(i int) string { return filepath.Join(c.dirs[i], "jetstream") }

// URL is node i's client URL; URLs all of them, as nats.Connect takes them.
func (c *cluster) URL(i int) string {
	return fmt.Sprintf("nats://127.0.0.1:%d", c.ports[i])
}

func (c *cluster) URLs() string {
	var u []string
	for i := range c.ports {
		u = append(u, c.URL(i))
	}
	return strings.Join(u, ",")
}

// leaderOf is the index of the node that leads group, or -1 when none does (or the
// cluster does not answer within 2 s). group is a stream's name, or
// "stream/consumer" for a consumer's own Raft group.
func (c *cluster) leaderOf(group string) int {
	js, _ := jetstream.New(c.nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var ci *jetstream.ClusterInfo
	if stream, consumer, ok := strings.Cut(group, "/"); ok {
		cons, err := js.Consumer(ctx, stream, consumer)
		if err != nil {
			return -1
		}
		ci = cons.CachedInfo().Cluster
	} else {
		st, err := js.Stream(ctx, group)
		if err != nil {
			return -1
		}
		ci = st.CachedInfo().Cluster
	}
	if ci == nil {
		return -1
	}
	var i int
	if _, err := fmt.Sscanf(ci.Leader, "n%d", &i); err != nil {
		return -1
	}
	return i
}

// consumerGroups names the consumers of stream as leaderOf takes them.
func (c *cluster) consumerGroups(stream string) []string {
	js, _ := jetstream.New(c.nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil
	}
	var out []string
	names := st.ConsumerNames(ctx)
	for name := range names.Name() {
		out = append(out, stream+"/"+name)
	}
	slices.Sort(out)
	return out
}

// moveLeader asks stream's leader to step down until node want leads it (or 30 s
// pass; the election is the cluster's choice): the test then knows which node a
// fault hits. It reports whether want leads.
func (c *cluster) moveLeader(stream string, want int) bool {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		l := c.leaderOf(stream)
		if l == want {
			return true
		}
		if l >= 0 {
			_, _ = c.nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, 2*time.Second)
		}
		time.Sleep(700 * time.Millisecond)
	}
	return false
}

// moveLeaderOff steps stream's leader down until a node other than avoid leads it.
func (c *cluster) moveLeaderOff(stream string, avoid int) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		switch l := c.leaderOf(stream); l {
		case -1:
		case avoid:
			_, _ = c.nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, 2*time.Second)
		default:
			return nil
		}
		time.Sleep(700 * time.Millisecond)
	}
	return errors.New(stream + " still led by node " + fmt.Sprint(avoid))
}

// watchElections measures, from now on, the broker's own failover for each group
// svc uses (a stream, "stream/consumer", or "meta", the JetStream meta group) whose
// leader was node lost before the fault (before: the leaders then): the time from now
// to the line a surviving node logs when it becomes the group's leader, at the
// node's microsecond resolution. The returned func waits for those lines (at most
// 30 s from now) and reports each group: its election's length, "kept nK" when lost
// did not lead it, "-" when no election was logged.
func (c *cluster) watchElections(lost int, groups []string, before map[string]int) func() string {
	t0 := time.Now()
	return func() string {
		took := make([]time.Duration, len(groups))
		for time.Since(t0) < 30*time.Second {
			left := 0
			for k, g := range groups {
				if took[k] == 0 && before[g] == lost {
					if at := c.electedAt(lost, g, t0); !at.IsZero() {
						took[k] = at.Sub(t0)
					} else {
						left++
					}
				}
			}
			if left == 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		var out []string
		for k, g := range groups {
			switch {
			case before[g] != lost:
				out = append(out, fmt.Sprintf("%s kept n%d", g, before[g]))
			case took[k] == 0:
				out = append(out, g+" -")
			default:
				out = append(out, fmt.Sprintf("%s %s", g, took[k].Round(time.Millisecond)))
			}
		}
		return strings.Join(out, ", ")
	}
}

// metaLeader is the node that last logged becoming the JetStream meta leader (-1:
// none did).
func (c *cluster) metaLeader() int {
	best, at := -1, time.Time{}
	for i := range c.n {
		for _, t := range c.leaderLines(i, "meta") {
			if t.After(at) {
				best, at = i, t
			}
		}
	}
	return best
}

// electedAt is the first time after t0 a node other than lost logged that it leads
// group (as watchElections names groups); zero if none did.
func (c *cluster) electedAt(lost int, group string, t0 time.Time) time.Time {
	var first time.Time
	for i := range c.n {
		if i == lost {
			continue
		}
		for _, t := range c.leaderLines(i, group) {
			if t.After(t0) && (first.IsZero() || t.Before(first)) {
				first = t
			}
		}
	}
	return first
}

// leaderLines are the times node i logged (since its last start) that it became
// group's leader.
func (c *cluster) leaderLines(i int, group string) []time.Time {
	want := "Self is new JetStream cluster metadata leader"
	if stream, consumer, ok := strings.Cut(group, "/"); ok {
		want = fmt.Sprintf("JetStream cluster new consumer leader for '$G > %s > %s'", stream, consumer)
	} else if group != "meta" {
		want = fmt.Sprintf("JetStream cluster new stream leader for '$G > %s'", group)
	}
	c.mu.Lock()
	l := c.logs[i]
	c.mu.Unlock()
	if l == nil {
		return nil
	}
	var out []time.Time
	for _, line := range strings.Split(l.String(), "\n") {
		// [pid] 2006/01/02 15:04:05.000000 [INF] message
		f := strings.SplitN(line, " ", 5)
		if len(f) < 5 || !strings.HasSuffix(f[4], want) {
			continue
		}
		if at, err := time.ParseInLocation("2006/01/02 15:04:05.000000", f[1]+" "+f[2], time.Local); err == nil {
			out = append(out, at)
		}
	}
	return out
}

// healthy waits until every stream and consumer on the cluster has a leader and all
// its other replicas are current: a node restarted a moment ago has caught up, so killing two
// others next leaves a quorum of up-to-date peers for every stream.
func (c *cluster) healthy(within time.Duration) {
	c.t.Helper()
	js, _ := jetstream.New(c.nc)
	testkit.Eventually(c.t, within, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		names := js.StreamNames(ctx)
		for name := range names.Name() {
			st, err := js.Stream(ctx, name)
			if err != nil {
				return fmt.Errorf("stream %s: %w", name, err)
			}
			info := st.CachedInfo()
			if err := replicasCurrent("stream "+name, info.Cluster, c.n); err != nil {
				return err
			}
			consumers := st.ListConsumers(ctx)
			for ci := range consumers.Info() {
				n := info.Config.Replicas // a consumer inherits its stream's, unless it sets its own (an ordered consumer: 1)
				if ci.Config.Replicas > 0 {
					n = ci.Config.Replicas
				}
				if err := replicasCurrent("consumer "+name+"/"+ci.Name, ci.Cluster, n); err != nil {
					return err
				}
			}
			if err := consumers.Err(); err != nil {
				return err
			}
		}
		return names.Err()
	})
}

// replicasCurrent says what is wrong with a Raft group of n peers: no leader, a
// replica missing, offline or behind.
func replicasCurrent(what string, ci *jetstream.ClusterInfo, n int) error {
	if ci == nil || ci.Leader == "" {
		return fmt.Errorf("%s has no leader", what)
	}
	if len(ci.Replicas) != n-1 {
		return fmt.Errorf("%s: %d replicas besides the leader, want %d", what, len(ci.Replicas), n-1)
	}
	for _, r := range ci.Replicas {
		if !r.Current || r.Offline {
			return fmt.Errorf("%s: replica %s not current", what, r.Name)
		}
	}
	return nil
}
