package logserver_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/internal/svcbin"
	"svc.dev/svc/internal/testkit"

	"svc.dev/svc/bench"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

var svcBin string

func TestMain(m *testing.M) { svcbin.Main(m, &svcBin) }

// logProc is a `svc log` process.
type logProc struct {
	cmd  *exec.Cmd
	base string
}

var addrRE = regexp.MustCompile(`msg="log server listening" addr=(\S+)`)

func startLog(t *testing.T, dir string, extra ...string) *logProc {
	t.Helper()
	args := append([]string{"log", "--file", filepath.Join(dir, "log.jsonl"), "--key", filepath.Join(dir, "log.key"),
		"--data", filepath.Join(dir, "data"), "--port", "0"}, extra...)
	cmd := exec.Command(svcBin, args...)
	cmd.Env = append(os.Environ(), "TEST_LOG_TOKEN=crash-test-token")
	return &logProc{cmd: cmd, base: "http://" + testkit.StartProcess(t, cmd, addrRE)}
}

func (p *logProc) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.cmd.Wait()
}

type acked struct {
	leaf  []byte
	index uint64
	head  *receipt.TreeHead
}

// TestKill9MidLoadLosesNothing kills the log server with SIGKILL while 32 clients
// append, restarts it on the same data, and checks that every acknowledged leaf is
// in the log at its index, that the log file holds them, and that every head handed
// out before the crash is consistent with the head after it.
func TestKill9MidLoadLosesNothing(t *testing.T) {
	dir := t.TempDir()
	key, _ := signer.GenerateKey()
	if _, _, err := key.WriteKeyFiles(dir, "log"); err != nil {
		t.Fatal(err)
	}
	p := startLog(t, dir)
	h := bench.NewHTTP(p.base, nil, 32) // a tokenless log: appends are not rate limited
	var mu sync.Mutex
	var got []acked
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for c := 0; c < 32; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				leaf := []byte(fmt.Sprintf("crash-test-client-%d-leaf-%d", c, i))
				proof, err := h.Append(ctx, leaf, i%5 == 0)
				if err != nil {
					if ctx.Err() == nil && !strings.Contains(err.Error(), "connection") && !strings.Contains(err.Error(), "EOF") {
						t.Errorf("append failed before the kill: %v", err)
					}
					return // the server died under us: this one was never acknowledged
				}
				th, err := receipt.DecodeTreeHead(proof.TreeHead)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got = append(got, acked{leaf: leaf, index: proof.Inclusion.LeafIndex, head: th})
				mu.Unlock()
			}
		}(c)
	}
	time.Sleep(2 * time.Second)
	p.kill9(t)
	cancel()
	wg.Wait()
	if len(got) < 100 {
		t.Fatalf("only %d appends acknowledged before the kill", len(got))
	}
	p2 := startLog(t, dir)
	final := head(t, p2.base, key)
	server := &client.LogServer{Base: p2.base}
	seen := map[uint64]bool{}
	for _, a := range got {
		if seen[a.index] {
			t.Fatalf("index %d acknowledged twice", a.index)
		}
		seen[a.index] = true
	}
	// Every head handed out is consistent with the final one.
	finalRoot, _ := merkle.ParseHash(final.RootHash)
	checked := map[uint64]bool{}
	for _, a := range got {
		if checked[a.head.TreeSize] {
			continue
		}
		checked[a.head.TreeSize] = true
		proof, err := server.Consistency(a.head.TreeSize, final.TreeSize)
		if err != nil {
			t.Fatal(err)
		}
		root, _ := merkle.ParseHash(a.head.RootHash)
		if err := merkle.VerifyConsistency(a.head.TreeSize, final.TreeSize, root, finalRoot, proof); err != nil {
			t.Fatalf("head at size %d is not consistent with the head after the restart: %v", a.head.TreeSize, err)
		}
	}
	// Every acknowledged leaf is at its index in the log file, and the file is the
	// log the final head commits to (its root at that size is the head's).
	f, err := os.Open(filepath.Join(dir, "log.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := merkle.ReadLogFile(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(entries)) < final.TreeSize {
		t.Fatalf("log file holds %d leaves, the log %d", len(entries), final.TreeSize)
	}
	tree, _ := merkle.NewTree(merkle.NewMemoryStore())
	for _, e := range entries[:final.TreeSize] {
		tree.Append(e.Hash)
	}
	if tree.Root() != finalRoot {
		t.Fatalf("the log file's root at size %d is not the final head's", final.TreeSize)
	}
	for _, a := range got {
		if a.index >= uint64(len(entries)) || entries[a.index].Hash != merkle.LeafHash(a.leaf) {
			t.Fatalf("acknowledged leaf %s (index %d) is not in the log after the restart", a.leaf, a.index)
		}
	}
	t.Logf("%d appends acknowledged before SIGKILL; log size after restart %d; %d distinct heads checked", len(got), final.TreeSize, len(checked))
}

func head(t *testing.T, base string, key *signer.Key) *receipt.TreeHead {
	t.Helper()
	var h struct {
		TreeHead *receipt.Envelope `json:"treeHead"`
	}
	if err := client.GetJSON(context.Background(), nil, base+"/head", &h); err != nil {
		t.Fatal(err)
	}
	if _, err := h.TreeHead.Verify([]signer.PublicKey{key.Public()}); err != nil {
		t.Fatal(err)
	}
	th, err := receipt.DecodeTreeHead(h.TreeHead)
	if err != nil {
		t.Fatal(err)
	}
	return th
}
