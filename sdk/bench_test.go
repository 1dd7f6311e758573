package sdk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"svc.dev/svc/exporters"
	"svc.dev/svc/receipt"
	"svc.dev/svc/sdk"
	"svc.dev/svc/signer"
)

// BenchmarkRecord measures the receipt path (sign, append to a local log file, write
// receipts/<id>.json with fsync) without exporters and with both exporters pointed at
// collectors that take 200 ms per request. Export is a queue hand-off, so the two
// should not differ beyond noise.
//
//	go test -run '^$' -bench BenchmarkRecord -benchtime 2s ./sdk
func BenchmarkRecord(b *testing.B) {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(200 * time.Millisecond)
		w.Write([]byte(`{}`))
	}))
	defer slow.Close()
	for _, withSink := range []bool{false, true} {
		name := "no-exporters"
		if withSink {
			name = "slow-collectors"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			key, _ := signer.KeyFromSeed(bytes.Repeat([]byte{9}, 32))
			log, err := receipt.OpenFileLog(filepath.Join(dir, "log.jsonl"), key, "")
			if err != nil {
				b.Fatal(err)
			}
			defer log.Close()
			var sink exporters.Sink
			if withSink {
				exps, err := exporters.Build(exporters.Config{
					OTel:   &exporters.OTelConfig{URL: slow.URL},
					Splunk: &exporters.SplunkConfig{URL: slow.URL, TokenEnv: "T"},
				}, nil, func(string) (string, bool) { return "t", true })
				if err != nil {
					b.Fatal(err)
				}
				sink = exporters.NewQueue(exps, exporters.QueueConfig{Size: b.N + 1}, io.Discard)
				defer func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
					defer cancel()
					sink.Close(ctx)
				}()
			}
			is, err := sdk.New(sdk.Settings{Key: key, AgentID: "a", Framework: "bench", Log: log, ReceiptsDir: filepath.Join(dir, "receipts"), Sink: sink})
			if err != nil {
				b.Fatal(err)
			}
			ev := sdk.ToolEvent{Tool: "search", Args: json.RawMessage(`{"q":"benchmark","limit":10}`)}
			out := sdk.Executed(map[string]any{"hits": []string{"a", "b", "c"}})
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := is.Record(ctx, ev, out, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
