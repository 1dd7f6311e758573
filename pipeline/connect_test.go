package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
)

// TestConnectFirstURLCredentialsReachEveryNode: with deploy/README's form
// (nats://svc:PASSWORD@nats-1,nats-2,nats-3) the password logs in to every node, so
// when the first-listed node dies the connection moves to another and JetStream keeps
// committing. nats.go alone sends it to the first node only ("Authorization
// Violation" on the others).
func TestConnectFirstURLCredentialsReachEveryNode(t *testing.T) {
	c := testkit.StartCluster(t, 3)
	// In the order given, so the connection is on the first-listed node, the one killed.
	nc, err := pipeline.Connect(pipeline.Credentials{URL: c.URLWithPassword()}, "connect-test", nats.DontRandomize(), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	first := strings.TrimPrefix(c.Nodes[0].ClientURL(), "nats://")
	if u := nc.ConnectedUrl(); !strings.HasSuffix(u, first) {
		t.Fatalf("connected to %s, not to the first node %s", nc.ConnectedUrlRedacted(), first)
	}
	c.Kill(0)
	testkit.Eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.Publish(ctx, "r3", []byte("after the first node died"))
		return err
	})
	if u := nc.ConnectedUrl(); strings.HasSuffix(u, first) {
		t.Fatalf("still on the killed node %s", u)
	}
}

// TestRedactURL: no password or token survives, whatever the form.
func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://svc:s3cret@a:4222,b:4222":  "nats://svc:xxxxx@a:4222,b:4222",
		"nats://s3cret@a:4222":             "nats://xxxxx@a:4222",
		"nats://a:4222,nats://u:s3cret@b":  "nats://a:4222,nats://u:xxxxx@b",
		"svc:s3cret@a:4222":                "xxxxx@a:4222",
		"nats://svc:s3/cret@a:4222":        "xxxxx@a:4222",
		"tls://svc:s%3Acret@a.example:443": "tls://svc:xxxxx@a.example:443",
		"nats://a:4222":                    "nats://a:4222",
	} {
		if got := pipeline.RedactURL(in); got != want || strings.Contains(got, "s3") {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
