package logserver_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"svc.dev/svc/internal/logservice"

	"svc.dev/svc/client"
	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// TestServiceOnExternalNATS runs the log service against a NATS server it did not
// start (reached by URL, as with --nats-url), and appends through it.
func TestServiceOnExternalNATS(t *testing.T) {
	broker, err := natsembed.Start(natsembed.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:-1", Password: "pw-of-tests"})
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Shutdown()
	url := natsembed.URL(broker, "pw-of-tests")
	if !strings.HasPrefix(url, "nats://svc:pw-of-tests@127.0.0.1:") {
		t.Fatalf("client URL %q", url)
	}
	key, _ := signer.GenerateKey()
	svc, err := logservice.Start(context.Background(), logservice.Config{
		DataDir: t.TempDir(), NATSURL: url, Replicas: 1, Signer: receipt.KeySigner{Key: key},
		Keys:    func(context.Context) (*signer.KeyDocument, error) { return nil, nil },
		Tenants: []logservice.TenantSpec{{ID: "default"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	ts := httptest.NewServer(svc.Handler())
	defer ts.Close()
	l, _ := client.NewHTTPLog(client.HTTPLogConfig{URL: ts.URL + "/append"})
	for i := 0; i < 3; i++ {
		p, err := l.Append(context.Background(), []byte{'a' + byte(i)})
		if err != nil || p.Inclusion.LeafIndex != uint64(i) {
			t.Fatalf("append %d: %v %+v", i, err, p)
		}
	}
}
