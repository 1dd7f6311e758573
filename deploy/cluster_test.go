package deploy_test

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
)

// TestNATSClusterRuns: the three node files, with only their addresses moved to
// loopback ports and their store to a temporary directory, form a JetStream cluster
// on which the pipeline's streams are created with three replicas, the nkey of
// $SVC_NATS_NKEY is admitted (and nothing else: no credentials, a password, another
// nkey), and a batch of the largest size commits; when the first-listed node, made
// the leader of SVC_LEAVES, dies as in a crash (testkit.Cluster.Kill: cut off, so it
// hands no leadership over), the connection svc opens (pipeline.Connect, as with
// --nats-nkey) moves to another node and the next batch commits once the others
// elected a leader.
func TestNATSClusterRuns(t *testing.T) {
	seed := newNKey(t)
	nkey, err := nats.NkeyOptionFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	nodes := &deployNodes{}
	testkit.BootCluster(t, nodes, 3, 30*time.Second, nkey).Close()
	urls := strings.Split(nodes.URLs(), ",")
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
	js := testkit.JetStream(t, nc)
	ctx := context.Background()
	testkit.Eventually(t, 30*time.Second, func() error { // the meta leader is elected
		return pipeline.EnsureStreams(ctx, js, pipeline.StreamConfig{Replicas: 3})
	})
	info := testkit.StreamInfo(t, js, pipeline.LeavesStream)
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
	testkit.LeadStream(t, nc, pipeline.LeavesStream, nodes.Nodes[0].Name())
	died := time.Now()
	nodes.Kill(0)
	testkit.Eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.Publish(ctx, pipeline.LeavesSubject("acme"), []byte("after nats-1 died"))
		return err
	})
	t.Logf("a batch committed again %v after nats-1 died (the others' election)", time.Since(died).Round(time.Millisecond))
}

// deployNodes are the three nodes of nats/nats-{1,2,3}.conf run in this process, with
// only their addresses moved to loopback ports and their store to a temporary
// directory (testkit.ClusterNodes; stopped and listed by the testkit.Cluster).
type deployNodes struct{ testkit.Cluster }

// Start starts the three nodes on fresh ports; n is 3, the files' count.
func (d *deployNodes) Start(t testing.TB, n int) error {
	ports := testkit.FreePorts(t, 2*n) // node i: client ports[2i], route ports[2i+1]
	var all []*server.Options
	for i := range n {
		opts := checkNATSConfig(t, fmt.Sprintf("nats/nats-%d.conf", i+1))
		opts.CheckConfig = false
		opts.Host, opts.Port = "127.0.0.1", ports[2*i]
		opts.HTTPPort = 0
		opts.Cluster.Host, opts.Cluster.Port = "127.0.0.1", ports[2*i+1]
		opts.StoreDir = filepath.Join(t.TempDir(), "jetstream")
		opts.SyncAlways = false // fsync per write on a shared test disk only slows the test
		for k, r := range opts.Routes {
			var j int
			if _, err := fmt.Sscanf(r.Hostname(), "nats-%d", &j); err != nil {
				t.Fatalf("route %s does not name a node", r)
			}
			opts.Routes[k] = &url.URL{Scheme: r.Scheme, Host: fmt.Sprintf("127.0.0.1:%d", ports[2*(j-1)+1])}
		}
		all = append(all, opts)
	}
	return d.StartNodes(t, all)
}
