package conformance

import "testing"

// FuzzBatchVerifyBytes: one batch, its caches kept across inputs, reaches on every
// input the verdict, first failing check and detail that verifying it alone reaches,
// so a cached grant or head never answers for a different one.
func FuzzBatchVerifyBytes(f *testing.F) {
	m, c, data := loadCase(f, "gateway-precommit-executed")
	opts, err := caseOptions(vectorsDir, m, c)
	if err != nil {
		f.Fatal(err)
	}
	opts.Log = nil
	_, _, chained := loadCase(f, "gateway-chain-depth-3-precommit")
	f.Add(data)
	f.Add(chained)
	f.Add([]byte(`{}`))
	batch := NewBatch(opts, BatchOptions{})
	f.Fuzz(func(t *testing.T, in []byte) {
		got := batch.VerifyBytes("fuzz", in)
		alone := VerifyBytes(in, opts)
		var detail string
		for _, ch := range alone.Checks {
			if !ch.OK {
				detail = ch.Detail
				break
			}
		}
		if got.Verified != alone.Verified || got.FailedCheck != alone.FirstFailure() || got.Detail != detail || got.Checks != len(alone.Checks) {
			t.Fatalf("batch: %v %q %q (%d checks); alone: %v %q %q (%d checks)", got.Verified, got.FailedCheck, got.Detail, got.Checks, alone.Verified, alone.FirstFailure(), detail, len(alone.Checks))
		}
	})
}
