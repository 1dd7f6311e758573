package monitor_test

import (
	"encoding/json"
	"testing"
	"time"

	"svc.dev/svc/merkle"
	"svc.dev/svc/monitor"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// Fuzz targets for the answers of the log server this package parses (/head,
// /checkpoints, /health). Checkpoint files and alarms are fuzzed in package witness;
// key documents are parsed by signer.ParseKeyDocument. Run one with e.g.
// go test ./monitor -run '^$' -fuzz '^FuzzParseHeadAnswer$' -fuzztime 10s.

func seedEnvelope(f *testing.F) *receipt.Envelope {
	k, err := signer.KeyFromSeed(make([]byte, 32))
	if err != nil {
		f.Fatal(err)
	}
	env, err := receipt.SignTreeHead(k, 2, merkle.LeafHash(nil).String(), time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), "")
	if err != nil {
		f.Fatal(err)
	}
	return env
}

func FuzzParseHeadAnswer(f *testing.F) {
	env := seedEnvelope(f)
	b, _ := json.Marshal(map[string]any{"treeHead": env})
	f.Add(b)
	f.Add([]byte(`{"treeHead":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		env, th, err := monitor.ParseHeadAnswer(data)
		if err != nil {
			return
		}
		if env.PayloadType != receipt.PayloadTreeHead {
			t.Fatalf("accepted payload type %q", env.PayloadType)
		}
		if _, err := merkle.ParseHash(th.RootHash); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzParseCheckpointList(f *testing.F) {
	env := seedEnvelope(f)
	th, _ := receipt.DecodeTreeHead(env)
	b, _ := json.Marshal(map[string]any{"checkpoints": []any{map[string]any{"treeSize": th.TreeSize, "rootHash": th.RootHash, "signedAt": th.Timestamp, "treeHead": env}}})
	f.Add(b)
	f.Add([]byte(`{"checkpoints":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cps, err := monitor.ParseCheckpointList(data)
		if err != nil {
			return
		}
		for _, cp := range cps {
			if cp.File.TreeSize != cp.Head.TreeSize || cp.File.RootHash != cp.Head.RootHash {
				t.Fatal("checkpoint fields disagree with its head")
			}
		}
	})
}

func FuzzParseHealth(f *testing.F) {
	f.Add([]byte(`{"ok":true,"keyid":"ab","checkpoints":true}`))
	f.Add([]byte(`{"ok":false,"error":"log unavailable: x"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if monitor.ParseHealth(data) == nil {
			var h struct{ OK bool }
			if json.Unmarshal(data, &h) != nil || !h.OK {
				t.Fatalf("accepted %q as healthy", data)
			}
		}
	})
}
