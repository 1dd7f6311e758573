package deploy_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
)

// TestNATSClusterRuns: the three node files, with only their addresses moved to
// loopback ports and their store to a temporary directory, form a JetStream cluster
// on which the pipeline's streams are created with three replicas, the nkey of
// $SVC_NATS_NKEY is admitted (and nothing else: no credentials, a password, another
// nkey), and a batch of the largest size commits; when the first-listed node dies,
// the connection svc opens (pipeline.Connect, as with --nats-nkey) moves to another
// node and the next batch commits.
func TestNATSClusterRuns(t *testing.T) {
	seed := newNKey(t)
	// Free loopback ports for the client and route listeners of each node.
	ports := make([][2]int, 3)
	for i := range ports {
		for j := range 2 {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ports[i][j] = ln.Addr().(*net.TCPAddr).Port
			ln.Close()
		}
	}
	var servers []*server.Server
	for i := range 3 {
		opts := checkNATSConfig(t, fmt.Sprintf("nats/nats-%d.conf", i+1))
		opts.CheckConfig = false
		opts.Host, opts.Port = "127.0.0.1", ports[i][0]
		opts.HTTPPort = 0
		opts.Cluster.Host, opts.Cluster.Port = "127.0.0.1", ports[i][1]
		opts.StoreDir = filepath.Join(t.TempDir(), "jetstream")
		opts.SyncAlways = false // fsync per write on a shared test disk only slows the test
		for k, r := range opts.Routes {
			var j int
			if _, err := fmt.Sscanf(r.Hostname(), "nats-%d", &j); err != nil {
				t.Fatalf("route %s does not name a node", r)
			}
			opts.Routes[k] = &url.URL{Scheme: r.Scheme, Host: fmt.Sprintf("127.0.0.1:%d", ports[j-1][1])}
		}
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		servers = append(servers, s)
	}
	for _, s := range servers {
		if !s.ReadyForConnections(20 * time.Second) {
			t.Fatalf("%s not ready", s.Name())
		}
	}
	urls := make([]string, 3)
	for i, s := range servers {
		urls[i] = s.ClientURL()
	}
	other := newNKey(t) // the nodes run with the first key already
	otherKey, err := nats.NkeyOptionFromSeed(other)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []nats.Option{nats.UserInfo("svc", "guess"), otherKey, nats.Name("no credentials")} {
		if nc, err := nats.Connect(strings.Join(urls, ","), o); err == nil {
			nc.Close()
			t.Fatal("the cluster admitted a connection without the nkey")
		}
	}
	nc, err := pipeline.Connect(pipeline.Credentials{URL: strings.Join(urls, ","), NKeyFile: seed}, "deploy-test", nats.DontRandomize())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	testkit.Eventually(t, 30*time.Second, func() error { // the meta leader is elected
		return pipeline.EnsureStreams(ctx, js, pipeline.StreamConfig{Replicas: 3})
	})
	st, err := js.Stream(ctx, pipeline.LeavesStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 3 || info.Cluster == nil || info.Cluster.Name != "svc" || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("SVC_LEAVES: replicas %d, cluster %+v; want 3 on cluster svc", info.Config.Replicas, info.Cluster)
	}
	big := make([]byte, pipeline.MaxBatchBytes)
	if _, err := js.Publish(ctx, pipeline.LeavesSubject("acme"), big); err != nil {
		t.Fatalf("a batch of %d bytes: %v", len(big), err)
	}
	if !strings.HasSuffix(nc.ConnectedUrl(), strings.TrimPrefix(urls[0], "nats://")) {
		t.Fatalf("connected to %s, not the first-listed node", nc.ConnectedUrl())
	}
	servers[0].Shutdown()
	testkit.Eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.Publish(ctx, pipeline.LeavesSubject("acme"), []byte("after nats-1 died"))
		return err
	})
}
