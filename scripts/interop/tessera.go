package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"svc.dev/svc/internal/projections"
	"svc.dev/svc/merkle"
	"svc.dev/svc/signer"
	"svc.dev/svc/witness"
)

// runTessera: Tessera's POSIX log under its hammer; this driver, as the log's
// witness client, sends each new checkpoint to svc witness --listen with a consistency
// proof built from Tessera's tiles, and verifies each cosignature.
func runTessera(r *report, dir, svcBin, posix, hammer string, leaves int) error {
	const origin = "example.com/tessera-interop"
	skey, vkey, err := note.GenerateKey(rand.Reader, origin)
	if err != nil {
		return err
	}
	logAddr := freeAddr()
	if _, err := r.startProc(dir, "tessera-posix", []string{"LOG_PRIVATE_KEY=" + skey}, posix, "--storage_dir", filepath.Join(dir, "tessera"), "--listen", logAddr); err != nil {
		return err
	}
	logURL := "http://" + logAddr
	if err := waitHTTP(logURL+"/checkpoint", 30*time.Second); err != nil {
		return fmt.Errorf("%w\n%s", err, logTail(dir, "tessera-posix"))
	}
	wURL, cosVKey, err := startSvcWitness(r, dir, svcBin, vkey)
	if err != nil {
		return err
	}
	hargs := []string{"--log_public_key=" + vkey, "--log_url=" + logURL, "--num_writers=8", "--max_write_ops=300",
		"--leaf_write_goal=" + strconv.Itoa(leaves), "--show_ui=false", "--max_runtime=5m", "--dup_chance=0"}
	h, err := r.startProc(dir, "hammer", nil, hammer, hargs...)
	if err != nil {
		return err
	}
	r.say("- Tessera's hammer: `hammer %s`", strings.Join(hargs, " "))
	done := make(chan error, 1)
	go func() { done <- h.Wait() }()
	f := &feeder{log: logURL, witness: wURL}
	if f.logV, err = note.NewVerifier(vkey); err != nil {
		return err
	}
	if f.cosV, err = witness.NewCosignatureVerifier(cosVKey); err != nil {
		return err
	}
	if err := f.run(done); err != nil {
		return fmt.Errorf("%w\nsvc witness: %s\nhammer: %s", err, logTail(dir, "svc-witness"), logTail(dir, "hammer"))
	}
	r.say("- %d add-checkpoint requests, %d cosigned checkpoints (each verified with x/mod's note: Tessera's key and svc witness's cosignature/v1 key), up to size %d; %d answered 409 and retried from the witness's size", f.requests, f.cosigned, f.size, f.conflicts)
	if f.size < uint64(leaves) {
		return fmt.Errorf("the last cosigned checkpoint is at size %d, below the hammer's %d leaves", f.size, leaves)
	}
	return nil
}

// startSvcWitness runs svc witness --listen for the log of vkey.
func startSvcWitness(r *report, dir, svcBin, vkey string) (string, string, error) {
	key, err := signer.GenerateKey()
	if err != nil {
		return "", "", err
	}
	keyPath, _, err := key.WriteKeyFiles(dir, "witness")
	if err != nil {
		return "", "", err
	}
	const name = "svc-witness.interop.example/w1"
	addr := freeAddr()
	args := []string{"witness", "--key", keyPath, "--out", filepath.Join(dir, "witness-out"), "--listen", addr, "--name", name, "--c2sp-log", vkey}
	if _, err := r.startProc(dir, "svc-witness", nil, svcBin, args...); err != nil {
		return "", "", err
	}
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.say("- `svc %s`", strings.Join(args, " "))
	return "http://" + addr, witness.CosignerVerifierKey(name, key.Public().Key), nil
}

// feeder sends a log's new checkpoints to a C2SP witness.
type feeder struct {
	log, witness string
	logV         note.Verifier
	cosV         *witness.CosignatureVerifier
	old          uint64 // what the witness holds
	size         uint64 // last cosigned
	requests     int
	cosigned     int
	conflicts    int
}

// run feeds until the hammer is done, then once more.
func (f *feeder) run(done <-chan error) error {
	var hammerErr error
	finished := false
	for !finished {
		select {
		case hammerErr = <-done:
			finished = true
		case <-time.After(300 * time.Millisecond):
		}
		if err := f.once(); err != nil {
			return err
		}
	}
	if hammerErr != nil {
		return fmt.Errorf("the hammer: %w", hammerErr)
	}
	return nil
}

// once sends the log's current checkpoint if it grew.
func (f *feeder) once() error {
	signed, err := get(f.log + "/checkpoint")
	if err != nil {
		return err
	}
	n, err := note.Open(signed, note.VerifierList(f.logV))
	if err != nil {
		return fmt.Errorf("the Tessera checkpoint: %w", err)
	}
	size, root, err := witness.ParseCheckpointBody(n.Text)
	if err != nil || size == 0 || size <= f.size {
		return err
	}
	tree := tlog.Tree{N: int64(size), Hash: tlog.Hash(root)}
	for range 2 {
		var proof []merkle.Hash
		if f.old > 0 && f.old < size {
			p, err := tlog.ProveTree(tree.N, int64(f.old), tlog.TileHashReader(tree, tiles{f.log}))
			if err != nil {
				return fmt.Errorf("consistency proof %d → %d from Tessera's tiles: %w", f.old, size, err)
			}
			for _, h := range p {
				proof = append(proof, merkle.Hash(h))
			}
		}
		f.requests++
		lines, err := projections.AddCheckpoint(context.Background(), http.DefaultClient, f.witness, f.old, proof, signed)
		var conflict *projections.ErrWitnessConflict
		if errors.As(err, &conflict) {
			f.conflicts++
			f.old = conflict.Size
			continue
		}
		if err != nil {
			return fmt.Errorf("add-checkpoint of size %d (old %d): %w", size, f.old, err)
		}
		if c, err := note.Open(append(signed, lines...), note.VerifierList(f.logV, f.cosV)); err != nil || len(c.Sigs) != 2 {
			return fmt.Errorf("svc witness's cosignature on size %d does not verify: %v\n%s", size, err, lines)
		}
		f.old, f.size = size, size
		f.cosigned++
		return nil
	}
	return fmt.Errorf("the witness kept answering 409 for size %d", size)
}

// tiles reads a C2SP log's hash tiles for x/mod's tlog (whose paths carry the
// height): a partial tile the log no longer holds is read from the full one.
type tiles struct{ base string }

func (tiles) Height() int { return 8 }

func (t tiles) ReadTiles(ts []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(ts))
	for i, tile := range ts {
		path := strings.Replace(tile.Path(), "tile/8/", "tile/", 1)
		data, err := get(t.base + "/" + path)
		if err != nil && tile.W < 256 {
			full := tile
			full.W = 256
			if data, err = get(t.base + "/" + strings.Replace(full.Path(), "tile/8/", "tile/", 1)); err == nil {
				data = data[:tile.W*32]
			}
		}
		if err != nil {
			return nil, err
		}
		out[i] = data
	}
	return out, nil
}

func (tiles) SaveTiles([]tlog.Tile, [][]byte) {}
