package testkit

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is an in-process JetStream cluster on loopback whose nodes admit only user
// ClusterUser with ClusterPassword, as a deployed cluster does (deploy/nats). Every
// route runs through a Proxy of its own (links[{i, j}]: node i dials node j through
// it) and each node advertises a dead end as its route address, so that Kill can cut
// a node off before it stops, as a crash does.
type Cluster struct {
	Nodes []*server.Server
	links map[[2]int]*Proxy
}

// ClusterUser and ClusterPassword log in to a Cluster.
const (
	ClusterUser     = "svc"
	ClusterPassword = "cluster-password-of-tests"
)

// ClusterNodes runs the nodes of a JetStream cluster on loopback: in this process
// (Cluster, from StartCluster) or as nats-server processes (internal/faults, whose
// nodes can be killed with SIGKILL, paused or cut off). BootCluster owns what every
// kind shares: ports chosen afresh on each of three tries, and a cluster counted as
// started only once an R-n stream can be created.
type ClusterNodes interface {
	// Start configures n nodes on freshly chosen ports and starts them, registering
	// their stop with t. An error means a node did not come up (most often a port
	// another process took between choosing and listening).
	Start(t testing.TB, n int) error
	// Stop stops every node that runs.
	Stop()
	// URLs is the comma-separated client URLs of the nodes, without credentials.
	URLs() string
}

// BootCluster starts nodes (up to three tries, each on new ports), then connects
// with opts and waits up to within until an R-n stream (PROBE, in memory) can be
// created. It returns that connection, open; it closes when the test ends, if not
// before.
func BootCluster(t testing.TB, nodes ClusterNodes, n int, within time.Duration, opts ...nats.Option) *nats.Conn {
	t.Helper()
	var err error
	for range 3 { // a port taken between choosing and listening: start again on new ones
		if err = nodes.Start(t, n); err == nil {
			break
		}
		nodes.Stop()
	}
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(nodes.URLs(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	Eventually(t, within, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "PROBE", Subjects: []string{"probe"}, Replicas: n, Storage: jetstream.MemoryStorage})
		return err
	})
	return nc
}

// StartCluster starts n nodes in this process and waits until an R-n stream can be
// created. The nodes stop when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{}
	BootCluster(t, c, n, 30*time.Second, nats.UserInfo(ClusterUser, ClusterPassword)).Close()
	return c
}

// Start starts n nodes on fresh ports (ClusterNodes).
func (c *Cluster) Start(t testing.TB, n int) error {
	routes, clients := FreePorts(t, n), FreePorts(t, n)
	var opts []*server.Options
	for i := range n {
		o := &server.Options{
			ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: clients[i],
			JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
			Users:   []*server.User{{Username: ClusterUser, Password: ClusterPassword}},
			Cluster: server.ClusterOpts{Name: "svc", Host: "127.0.0.1", Port: routes[i]},
		}
		for j := range n {
			if j != i {
				o.Routes = append(o.Routes, server.RoutesFromStr(fmt.Sprintf("nats://127.0.0.1:%d", routes[j]))...)
			}
		}
		opts = append(opts, o)
	}
	return c.StartNodes(t, opts)
}

// StartNodes starts one node in this process for each of opts, in place of c.Nodes,
// and waits until each takes connections; they stop when the test ends. A
// ClusterNodes whose nodes need options of their own (deploy's configuration
// files) embeds a Cluster and starts through it.
func (c *Cluster) StartNodes(t testing.TB, opts []*server.Options) error {
	c.Nodes = nil
	c.proxyRoutes(t, opts)
	for _, o := range opts {
		s, err := server.NewServer(o)
		if err != nil {
			return err
		}
		go s.Start()
		c.Nodes = append(c.Nodes, s)
	}
	t.Cleanup(c.Stop)
	for _, s := range c.Nodes {
		if !s.ReadyForConnections(20 * time.Second) {
			return fmt.Errorf("node %s not ready", s.Name())
		}
	}
	return nil
}

// URLs is the comma-separated client URLs of the nodes, without credentials.
func (c *Cluster) URLs() string {
	var u []string
	for _, s := range c.Nodes {
		u = append(u, s.ClientURL())
	}
	return strings.Join(u, ",")
}

// URLWithPassword is URLs with the user and password written into the first URL
// only, the form deploy/README documents.
func (c *Cluster) URLWithPassword() string {
	return strings.Replace(c.URLs(), "nats://", "nats://"+ClusterUser+":"+ClusterPassword+"@", 1)
}

// Kill stops node i as a crash (kill -9) does: every route of it is cut first, then
// it shuts down. server.Shutdown alone hands the leadership of each Raft group the
// node leads to a follower (it steps them down), so the others elected no leader and
// the loss cost milliseconds; cut off first, the step-downs reach nobody, the routes
// and client connections close as a dead process's sockets do, and the followers
// elect after Raft's election timeout (4-9 s).
func (c *Cluster) Kill(i int) {
	for k, l := range c.links {
		if k[0] == i || k[1] == i {
			l.SetCut(true)
		}
	}
	c.Nodes[i].Shutdown()
	c.Nodes[i].WaitForShutdown()
}

// proxyRoutes puts a Proxy on every route of opts that names another node's route
// port, and makes each node advertise a dead end as its route address (no node
// learns a way around the proxies).
func (c *Cluster) proxyRoutes(t testing.TB, opts []*server.Options) {
	dead := StartProxy(t, "127.0.0.1:1")
	dead.SetCut(true) // accepts and closes: the advertised route address leads nowhere
	node := map[string]int{}
	for j, o := range opts {
		node[fmt.Sprintf("%s:%d", o.Cluster.Host, o.Cluster.Port)] = j
	}
	c.links = map[[2]int]*Proxy{}
	for i, o := range opts {
		o.Cluster.Advertise = dead.Addr()
		for k, r := range o.Routes {
			j, ok := node[r.Host]
			if !ok {
				continue
			}
			p := StartProxy(t, r.Host)
			c.links[[2]int{i, j}] = p
			o.Routes[k] = &url.URL{Scheme: r.Scheme, Host: p.Addr()}
		}
	}
}

// LeadStream makes the node named leader lead stream: it asks the stream's leader,
// over nc, to step down until an election falls on that node (within a minute).
func LeadStream(t testing.TB, nc *nats.Conn, stream, leader string) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		info := st.CachedInfo()
		if info.Cluster != nil && info.Cluster.Leader == leader {
			return nil
		}
		if _, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, 2*time.Second); err != nil {
			return err
		}
		time.Sleep(500 * time.Millisecond)
		return fmt.Errorf("%s led by %v, want %s", stream, info.Cluster, leader)
	})
}

// Stop stops every node (ClusterNodes).
func (c *Cluster) Stop() {
	for _, s := range c.Nodes {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// FreePorts returns n loopback ports free a moment ago (listen on :0, note the
// port, close): for servers whose ports must be known before they listen, such as a
// cluster whose routes name each other; another process may take one in between.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// StartServer starts one nats-server in this process with opts and waits until it
// takes connections; it stops when the test ends.
func StartServer(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv
}
