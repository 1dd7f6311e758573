package logservice

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/testkit"
)

// TestBucketLedNeedsALeader: with two of its three nodes gone, the lease bucket's
// last replica still answers a read of a key (a direct get), but bucketLed says the
// bucket has no leader, so a standby's grace does not end during an election.
func TestBucketLedNeedsALeader(t *testing.T) {
	c := testkit.StartCluster(t, 3)
	ctx := context.Background()
	var kv jetstream.KeyValue
	testkit.Eventually(t, 30*time.Second, func() (err error) {
		nc, err := nats.Connect(c.URLs(), nats.UserInfo(testkit.ClusterUser, testkit.ClusterPassword))
		if err != nil {
			return err
		}
		js := testkit.JetStream(t, nc)
		kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: LeaseBucket, TTL: 5 * time.Second, Replicas: 3, Storage: jetstream.MemoryStorage})
		if err != nil {
			return err
		}
		_, err = kv.Put(ctx, "acme", []byte("holder"))
		return err
	})
	if !bucketLed(ctx, kv) {
		t.Fatal("bucketLed: no leader on a healthy cluster")
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Cluster.Leader
	// Keep one follower: connect to it alone, then take the two other nodes away.
	keep := -1
	for i, n := range c.Nodes {
		if n.Name() != leader {
			keep = i
		}
	}
	nc, err := nats.Connect(c.Nodes[keep].ClientURL(), nats.UserInfo(testkit.ClusterUser, testkit.ClusterPassword))
	if err != nil {
		t.Fatal(err)
	}
	follower, err := testkit.JetStream(t, nc).KeyValue(ctx, LeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Nodes {
		if i != keep {
			c.Kill(i)
		}
	}
	// The survivor may lead for a moment (a leader that lost its quorum steps down
	// after a while): wait until it says no leader, then read the key there.
	testkit.Eventually(t, 40*time.Second, func() error {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if bucketLed(lctx, follower) {
			return fmt.Errorf("bucketLed: a leader, with two of three nodes gone")
		}
		return nil
	})
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := follower.Get(gctx, "acme"); err != nil {
		t.Fatalf("the last replica does not answer a read without a leader (%v): the probe bucketLed replaces would not be fooled", err)
	}
}
