package testkit

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is an in-process JetStream cluster on loopback whose nodes admit only user
// ClusterUser with ClusterPassword, as a deployed cluster does (deploy/nats).
type Cluster struct {
	Nodes []*server.Server
}

// ClusterUser and ClusterPassword log in to a Cluster.
const (
	ClusterUser     = "svc"
	ClusterPassword = "cluster-password-of-tests"
)

// StartCluster starts n nodes and waits until an R-n stream can be created. The nodes
// stop when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	var err error
	for range 3 { // a port taken between choosing and listening: start again on new ones
		c := &Cluster{}
		if err = c.start(t, n); err == nil {
			return c.ready(t)
		}
		c.stop()
	}
	t.Fatal(err)
	return nil
}

func (c *Cluster) start(t testing.TB, n int) error {
	routes, clients := FreePorts(t, n), FreePorts(t, n)
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
		s, err := server.NewServer(o)
		if err != nil {
			return err
		}
		go s.Start()
		c.Nodes = append(c.Nodes, s)
	}
	t.Cleanup(c.stop)
	for _, s := range c.Nodes {
		if !s.ReadyForConnections(20 * time.Second) {
			return fmt.Errorf("node %s not ready", s.Name())
		}
	}
	return nil
}

func (c *Cluster) ready(t testing.TB) *Cluster {
	nc, err := nats.Connect(c.URLs(), nats.UserInfo(ClusterUser, ClusterPassword))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	Eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "PROBE", Subjects: []string{"probe"}, Replicas: len(c.Nodes), Storage: jetstream.MemoryStorage})
		return err
	})
	return c
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

// Kill stops node i at once: its connections and routes drop and its raft groups lose
// a member without handing leadership over (server.Shutdown; no lame-duck mode).
func (c *Cluster) Kill(i int) {
	c.Nodes[i].Shutdown()
	c.Nodes[i].WaitForShutdown()
}

func (c *Cluster) stop() {
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
