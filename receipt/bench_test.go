package receipt_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"svc.dev/svc/receipt"
)

// BenchmarkFinish times Issuer.Finish with a local log file, for a receipt with a 2 KB
// result: bundle files written and fsynced before Finish returns (sync), and written
// behind it (write-behind, what the gateway does with logFile). It reports p50, p99,
// and the process's CPU time per receipt (user and system, from getrusage: the
// bundle writer's too), the floor of what a gateway call's receipt costs.
//
//	go test -run '^$' -bench BenchmarkFinish -benchtime 2000x ./receipt/
func BenchmarkFinish(b *testing.B) {
	result := json.RawMessage(fmt.Sprintf(`{"content":[{"type":"text","text":%q}]}`, strings.Repeat("x", 2000)))
	for _, mode := range []string{"sync", "write-behind"} {
		b.Run(mode, func(b *testing.B) {
			is := benchIssuer(b, receipt.KindSDK, mode == "write-behind")
			var d []time.Duration
			cpu0 := cpuTime(b)
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
			b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(len(d)), "cpu-µs/op")
			slices.Sort(d)
			b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchIssuer is an issuer with a local log file in a temporary directory, closed
// when the benchmark ends.
func benchIssuer(b *testing.B, kind string, writeBehind bool) *receipt.Issuer {
	dir := b.TempDir()
	key := testKey(b, 1)
	l, err := receipt.OpenFileLog(filepath.Join(dir, "log.jsonl"), key, "")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	is, err := receipt.NewIssuer(receipt.IssuerConfig{Key: key, Kind: kind, Log: l,
		ReceiptsDir: filepath.Join(dir, "receipts"), WriteBehind: writeBehind})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { is.Close() })
	return is
}

// BenchmarkFileLogAppendParallel appends 5 KB leaves to a FileLog from 1, 8 and 32
// callers at once and reports appends/s and the fsyncs they shared (appends per
// distinct signed head, one head per commit).
//
//	go test -run '^$' -bench FileLogAppendParallel -benchtime 3000x ./receipt/
func BenchmarkFileLogAppendParallel(b *testing.B) {
	for _, callers := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("callers-%d", callers), func(b *testing.B) {
			key := testKey(b, 1)
			l, err := receipt.OpenFileLog(filepath.Join(b.TempDir(), "log.jsonl"), key, "")
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			pad := strings.Repeat("x", 5000)
			var mu sync.Mutex
			heads := map[uint64]bool{}
			var next atomic.Int64
			b.ResetTimer()
			t0 := time.Now()
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() {
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						p, err := l.Append(context.Background(), fmt.Appendf(nil, `{"i":%d,"pad":%q}`, i, pad))
						if err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						heads[p.Inclusion.TreeSize] = true
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "appends/s")
			b.ReportMetric(float64(b.N)/float64(len(heads)), "appends/commit")
		})
	}
}

// BenchmarkLeaf times what a receipt costs in CPU before the log: the predicate and
// statement in canonical form, the argument and result digests and the signature
// (Issuer.Leaf, which Finish calls before it appends), for a gateway-like call: a
// delegation envelope, a policy and a 1 KB text result; plain, and cited: the tool
// citing its definition (tool.definitionDigest and definitionLeafIndex, what every
// gateway receipt carries since issue 32), each with the process's CPU time per op
// (getrusage, which a loaded machine disturbs less than the wall clock).
//
//	go test -run '^$' -bench BenchmarkLeaf -benchmem ./receipt/
func BenchmarkLeaf(b *testing.B) {
	is := benchIssuer(b, receipt.KindGateway, false)
	grant := receipt.Sign(receipt.PayloadDelegation, []byte(`{"agent":"bench-agent","principal":"alice","scopes":["read_text_file"],"notBefore":"2026-11-22T00:00:00Z","notAfter":"2026-11-22T02:00:00Z","pad":"`+strings.Repeat("g", 500)+`"}`), testKey(b, 2))
	principal := "alice"
	call := receipt.Call{
		Principal:  receipt.Principal{ID: &principal, KeyID: testKey(b, 2).KeyID(), Provenance: receipt.Attested},
		Agent:      receipt.Agent{ID: "bench-agent", Provenance: receipt.Attested},
		Delegation: &receipt.Delegation{Envelope: grant, Provenance: receipt.Attested},
		Session:    receipt.Session{Provenance: receipt.Claimed},
		Model:      receipt.Model{Provenance: receipt.Claimed},
		Tool:       receipt.Tool{Name: "read_text_file", Provenance: receipt.Observed},
		Args:       json.RawMessage(`{"path":"/tmp/svc-bench-gateway-x/data/hello.txt"}`),
		Facts:      map[string]receipt.Fact{},
		Policy: &receipt.Policy{Decision: receipt.Allow, Reasons: []string{"all"}, Errors: []string{},
			PolicyDigest: strings.Repeat("ab", 32), Provenance: receipt.Observed},
	}
	result := json.RawMessage(fmt.Sprintf(`{"content":[{"type":"text","text":%q}]}`, strings.Repeat("hello from the filesystem server\n", 32)))
	exec := receipt.Execution{Status: receipt.StatusExecuted, Result: result, Provenance: receipt.Observed}
	cited := call
	leaf := uint64(123456)
	cited.Tool.DefinitionDigest, cited.Tool.DefinitionLeafIndex = strings.Repeat("cd", 32), &leaf
	for _, c := range []struct {
		name string
		call receipt.Call
	}{{"plain", call}, {"cited", cited}} {
		b.Run(c.name, func(b *testing.B) {
			cpu0, n := cpuTime(b), 0
			for b.Loop() {
				p, err := is.Begin(c.call)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := is.Leaf(p, exec); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(n), "cpu-ns/op")
		})
	}
}
