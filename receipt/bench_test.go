package receipt_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/receipt"
)

// BenchmarkFinish times Issuer.Finish with a local log file, for a receipt with a 2 KB
// result: bundle files written and fsynced before Finish returns (sync), and written
// behind it (write-behind, what the gateway does with logFile). It reports p50, p99.
//
//	go test -run '^$' -bench BenchmarkFinish -benchtime 2000x ./receipt/
func BenchmarkFinish(b *testing.B) {
	result := json.RawMessage(fmt.Sprintf(`{"content":[{"type":"text","text":%q}]}`, strings.Repeat("x", 2000)))
	for _, mode := range []string{"sync", "write-behind"} {
		b.Run(mode, func(b *testing.B) {
			dir := b.TempDir()
			key := testKey(b, 1)
			l, err := receipt.OpenFileLog(filepath.Join(dir, "log.jsonl"), key, "")
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			is, err := receipt.NewIssuer(receipt.IssuerConfig{Key: key, Kind: receipt.KindSDK, Log: l,
				ReceiptsDir: filepath.Join(dir, "receipts"), WriteBehind: mode == "write-behind"})
			if err != nil {
				b.Fatal(err)
			}
			defer is.Close()
			var d []time.Duration
			for i := 0; b.Loop(); i++ {
				p, err := is.Begin(sdkCall(fmt.Sprintf(`{"i":%d,"q":"lookup"}`, i)))
				if err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				if _, err := is.Finish(context.Background(), p, receipt.Execution{Status: receipt.StatusExecuted, Result: result, Provenance: receipt.Observed}); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(t0))
			}
			slices.Sort(d)
			b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs")
		})
	}
}
