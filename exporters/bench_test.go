package exporters_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"svc.dev/svc/exporters"
	"svc.dev/svc/receipt"
)

// BenchmarkExportThroughput measures receipts/s delivered to both exporters (OTLP and
// HEC, against local collectors that accept at once), standalone and through the
// durable stream on an embedded NATS (fsync off).
//
//	go test -run '^$' -bench BenchmarkExportThroughput -benchtime 5000x ./exporters
func BenchmarkExportThroughput(b *testing.B) {
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte(`{}`))
	}))
	defer col.Close()
	getenv := func(string) (string, bool) { return "t", true }
	exps, err := exporters.Build(exporters.Config{
		OTel:   &exporters.OTelConfig{URL: col.URL},
		Splunk: &exporters.SplunkConfig{URL: col.URL, TokenEnv: "T"},
	}, nil, getenv)
	if err != nil {
		b.Fatal(err)
	}
	ti := newTestIssuer(b, receipt.KindSDK)
	var bundles []*receipt.Bundle
	for i := 0; i < 200; i++ {
		bundles = append(bundles, ti.simple(b))
	}
	run := func(b *testing.B, sink exporters.Sink, exported func() uint64) {
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			sink.Export(context.Background(), bundles[i%len(bundles)])
		}
		for exported() < uint64(2*b.N) {
			time.Sleep(time.Millisecond)
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "receipts/s")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sink.Close(ctx)
	}
	b.Run("queue", func(b *testing.B) {
		q := exporters.NewQueue(exps, exporters.QueueConfig{Size: b.N + 1}, io.Discard)
		run(b, q, func() uint64 { return q.Stats().Exported })
	})
	b.Run("stream", func(b *testing.B) {
		nc := startBroker(b)
		// Distinct receipts: the stream stores a receipt id once.
		var distinct []*receipt.Bundle
		for i := 0; i < b.N; i++ {
			distinct = append(distinct, renumber(b, bundles[i%len(bundles)], i))
		}
		s, err := exporters.NewStreamSink(context.Background(), nc, "bench", exps, exporters.StreamOptions{Stderr: io.Discard, Queue: exporters.QueueConfig{Size: b.N + 1}, Router: exporters.RouterConfig{}})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			s.Export(context.Background(), distinct[i])
		}
		for s.Stats().Exported < uint64(2*b.N) {
			time.Sleep(time.Millisecond)
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "receipts/s")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Close(ctx)
	})
}

// renumber gives a bundle a new receipt id (re-signing is not needed for export).
func renumber(b *testing.B, in *receipt.Bundle, i int) *receipt.Bundle {
	st, err := receipt.DecodeStatement(in.Envelope)
	if err != nil {
		b.Fatal(err)
	}
	var p map[string]any
	json.Unmarshal(st.Predicate, &p)
	id := []byte("00000000-0000-4000-8000-000000000000")
	for j, k := len(id)-1, i; k > 0; j-- {
		id[j] = "0123456789"[k%10]
		k /= 10
	}
	p["receiptId"] = string(id)
	st.Predicate, _ = json.Marshal(p)
	payload, _ := json.Marshal(st)
	env := *in.Envelope
	env.Payload = payload
	out := *in
	out.Envelope = &env
	return &out
}
