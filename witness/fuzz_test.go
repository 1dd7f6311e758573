package witness_test

import (
	"encoding/json"
	"testing"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
	"svc.dev/svc/witness"
)

// Fuzz targets for every parser of outside input in this package: checkpoint files
// (fetched from the checkpoints host and from other witnesses), the witness state (a
// file on disk that may be damaged) and alarm files (read back by the witness and by
// log-check). Run one with e.g.
// go test ./witness -run '^$' -fuzz '^FuzzParseCheckpoint$' -fuzztime 10s.

func seedHead(f *testing.F) (*receipt.Envelope, *receipt.TreeHead) {
	k, err := signer.KeyFromSeed(make([]byte, 32))
	if err != nil {
		f.Fatal(err)
	}
	th := receipt.TreeHead{TreeSize: 3, RootHash: merkle.LeafHash([]byte("r")).String(), Timestamp: "2026-01-02T03:04:05.678Z", Log: "acme-prod"}
	env, err := receipt.SignJSON(receipt.PayloadTreeHead, th, k)
	if err != nil {
		f.Fatal(err)
	}
	return env, &th
}

func FuzzParseCheckpoint(f *testing.F) {
	env, th := seedHead(f)
	file, _ := json.Marshal(client.CheckpointFile{Tenant: "acme", LogID: th.Log, TreeSize: th.TreeSize, RootHash: th.RootHash, SignedAt: th.Timestamp, Envelope: env})
	api, _ := json.Marshal(map[string]any{"treeSize": th.TreeSize, "rootHash": th.RootHash, "signedAt": th.Timestamp, "treeHead": env})
	f.Add(file)
	f.Add(api)
	f.Add([]byte(`{"treeSize":1,"envelope":null}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cp, err := client.ParseCheckpoint(data)
		if err != nil {
			return
		}
		// What parses is self-consistent: the unsigned fields say what the head says.
		if cp.File.TreeSize != cp.Head.TreeSize || cp.File.RootHash != cp.Head.RootHash || cp.File.LogID != cp.Head.Log {
			t.Fatalf("unsigned fields disagree with the signed head: %+v %+v", cp.File, cp.Head)
		}
		if _, err := merkle.ParseHash(cp.Head.RootHash); err != nil {
			t.Fatal(err)
		}
		// And it survives a round trip.
		again, err := json.Marshal(cp.File)
		if err != nil {
			t.Fatal(err)
		}
		cp2, err := client.ParseCheckpoint(again)
		if err != nil || cp2.Head.TreeSize != cp.Head.TreeSize || cp2.Head.RootHash != cp.Head.RootHash {
			t.Fatalf("round trip: %v", err)
		}
	})
}

func FuzzParseState(f *testing.F) {
	env, th := seedHead(f)
	st, _ := json.Marshal(witness.State{Tenant: "acme", LogID: th.Log, TreeSize: th.TreeSize, RootHash: th.RootHash, SignedAt: th.Timestamp,
		WitnessedAt: signer.FormatTime(time.Unix(0, 0)), Envelope: env})
	f.Add(st)
	f.Add([]byte(`{"tenant":"default","treeSize":0}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := witness.ParseState(data)
		if err != nil {
			return
		}
		th, err := receipt.DecodeTreeHead(s.Envelope)
		if err != nil || th.TreeSize != s.TreeSize || th.RootHash != s.RootHash {
			t.Fatalf("accepted a state whose head disagrees: %v", err)
		}
	})
}

func FuzzParseAlarm(f *testing.F) {
	env, th := seedHead(f)
	a, _ := json.Marshal(witness.Alarm{Kind: witness.AlarmSecondHistory, Tenant: "acme", Offered: &witness.HeadRef{TreeSize: th.TreeSize, RootHash: th.RootHash, Envelope: env}})
	f.Add(a)
	f.Add([]byte(`{"kind":"fork"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := witness.ParseAlarm(data)
		if err != nil {
			return
		}
		if a.Offered == nil || a.Kind == "" {
			t.Fatal("accepted an alarm without kind or offered head")
		}
	})
}
