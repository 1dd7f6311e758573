package tenancy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
)

// TestStartReadsTheSnapshot: after 700 admin events published through a view that
// writes snapshots, a new view (another process's start, or log-admin's) reads the
// snapshot and fewer than SnapshotEvery events after it, and folds the same tenants
// and tokens as one that read the whole stream.
func TestStartReadsTheSnapshot(t *testing.T) {
	connect := broker(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, js := connect()
	store, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: SnapshotBucket})
	if err != nil {
		t.Fatal(err)
	}
	writer := NewView(js, nil, nil)
	writer.WriteSnapshots(store)
	if err := writer.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	a := &Admin{JS: js, View: writer}
	var tokens []string
	for i := range 350 { // 700 events: a tenant and a token each
		id := fmt.Sprintf("tenant-%03d", i)
		if _, err := a.AddTenant(ctx, "test", id, ""); err != nil {
			t.Fatal(err)
		}
		tok, _, err := a.AddToken(ctx, "test", id, "ci")
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tok)
	}
	if _, err := a.RevokeToken(ctx, "test", "tenant-007", Prefix(hashHex(tokens[7]))); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if info, err := store.GetInfo(ctx, snapshotObject); err != nil || writer.Seq() < 512 {
			return fmt.Errorf("no snapshot past 512 yet: %v %v", info, err)
		}
		return nil
	})
	var announced []string
	_, js2 := connect()
	reader := NewView(js2, nil, func(t Tenant) { announced = append(announced, t.ID) })
	if err := reader.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	st := reader.Stats()
	if st.SnapshotSeq < 512 || st.Events >= SnapshotEvery || uint64(st.Events) != writer.Seq()-st.SnapshotSeq {
		t.Fatalf("start read %+v of %d events; want a snapshot past 512 and only the events after it", st, writer.Seq())
	}
	full := foldAll(t, js2)
	if !slices.EqualFunc(reader.Tenants(), full.Tenants(), func(x, y Tenant) bool {
		return x.ID == y.ID && x.Plan == y.Plan && slices.Equal(x.Tokens, y.Tokens)
	}) || len(reader.Tenants()) != 350 || len(announced) < 350 {
		t.Fatalf("snapshot start folds %d tenants (%d announced), the full replay %d", len(reader.Tenants()), len(announced), len(full.Tenants()))
	}
	if !reader.Authorized("tenant-300", tokens[300]) || reader.Authorized("tenant-007", tokens[7]) || reader.Authorized("tenant-301", tokens[300]) {
		t.Fatal("tokens after a snapshot start: a live token refused, a revoked or another tenant's accepted")
	}
}

// foldAll folds every event of SVC_ADMIN, read one by one, into a view.
func foldAll(t *testing.T, js jetstream.JetStream) *View {
	ctx := context.Background()
	stream, err := js.Stream(ctx, pipeline.AdminStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v := NewView(js, nil, nil)
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := DecodeEvent(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		v.Apply(seq, ev)
	}
	return v
}

func hashHex(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}
