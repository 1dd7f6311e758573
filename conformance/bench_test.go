package conformance

import (
	"os"
	"path/filepath"
	"testing"
)

func loadCase(tb testing.TB, name string) (*Manifest, *Case, []byte) {
	tb.Helper()
	m, err := LoadManifest(vectorsDir)
	if err != nil {
		tb.Fatal(err)
	}
	for i := range m.Cases {
		if m.Cases[i].Name == name {
			data, err := os.ReadFile(filepath.Join(vectorsDir, m.Cases[i].Bundle))
			if err != nil {
				tb.Fatal(err)
			}
			return m, &m.Cases[i], data
		}
	}
	tb.Fatalf("no case %s", name)
	return nil, nil, nil
}

// BenchmarkVerify measures verify throughput on one core: bundles/s is 1e9/ns_op.
// Run with -cpu 1.
func BenchmarkVerify(b *testing.B) {
	for _, name := range []string{"gateway-executed", "gateway-precommit-executed", "sdk-executed"} {
		b.Run(name, func(b *testing.B) {
			m, c, data := loadCase(b, name)
			opts, err := caseOptions(vectorsDir, m, c)
			if err != nil {
				b.Fatal(err)
			}
			opts.Log = nil // the log copy is read once per run, not per bundle
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if r := VerifyBytes(data, opts); !r.Verified {
					b.Fatal(r.FirstFailure())
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "bundles/s")
		})
	}
}

// FuzzVerifyBytes: the verifier never panics on any input and never verifies a bundle
// that is not byte-identical in meaning to a good one.
func FuzzVerifyBytes(f *testing.F) {
	m, c, data := loadCase(f, "gateway-precommit-executed")
	opts, err := caseOptions(vectorsDir, m, c)
	if err != nil {
		f.Fatal(err)
	}
	opts.Log = nil
	seed := VerifyBytes(data, opts)
	if !seed.Verified {
		f.Fatalf("the seed bundle does not verify: %s", seed.FirstFailure())
	}
	f.Add(data)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"envelope":{"payloadType":"x","payload":"","signatures":[]},"treeHead":null,"inclusion":{}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := VerifyBytes(in, opts)
		if r.Verified && r.ReceiptID != seed.ReceiptID {
			t.Fatalf("an unknown bundle verified: %s", r.ReceiptID)
		}
	})
}
