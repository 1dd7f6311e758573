package logserver_test

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/tlog"

	"svc.dev/svc/internal/logserver"
	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/sequencer"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/merkle"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// The large-log test grows a log by a fast path (the tree store's level files written
// directly, and one committed batch ending at the last leaf, so the log of record and
// the store agree), then restarts the sequencer in a separate process and reads the
// log through its C2SP tiles with sumdb/tlog. It reports that process's restart time
// and RSS at each size: memory stays flat in the log's size because the sequencer
// keeps the compact range, each level's edge tile and the idempotency window, and
// reads everything else from the level files.
//
// Sizes: SVC_LARGE_SIZES (default "1000000,10000000"; "1000000,10000000,100000000"
// for the 100M run, about 6.4 GB of disk and two minutes of one core to grow).
// `go tool task test:large` runs all three.

const largeSeedHex = "6c617267652d6c6f672d746573742d6b65792d736565642d3332627974657321"

func largeKey(t testing.TB) *signer.Key {
	seed, _ := hex.DecodeString(largeSeedHex)
	k, err := signer.KeyFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// largeLeaf is leaf i of the grown log.
func largeLeaf(buf []byte, i uint64) []byte {
	return strconv.AppendUint(append(buf[:0], "large log leaf "...), i, 10)
}

// grower appends leaves to a tree store's level files directly: the fast path.
type grower struct {
	dir     string
	n       uint64
	files   []*os.File
	w       []*bufio.Writer
	pending []merkle.Hash // the left sibling waiting at each level
	has     []bool
}

func (g *grower) level(l int) *bufio.Writer {
	for len(g.w) <= l {
		f, err := os.OpenFile(filepath.Join(g.dir, merkle.LevelFileName(uint8(len(g.w)))), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			panic(err)
		}
		g.files = append(g.files, f)
		g.w = append(g.w, bufio.NewWriterSize(f, 1<<20))
		g.pending = append(g.pending, merkle.Hash{})
		g.has = append(g.has, false)
	}
	return g.w[l]
}

func (g *grower) growTo(t testing.TB, n uint64) {
	var buf []byte
	for ; g.n < n; g.n++ {
		buf = largeLeaf(buf, g.n)
		h := merkle.LeafHash(buf)
		for l := 0; ; l++ {
			if _, err := g.level(l).Write(h[:]); err != nil {
				t.Fatal(err)
			}
			if !g.has[l] {
				g.pending[l], g.has[l] = h, true
				break
			}
			h = merkle.NodeHash(g.pending[l], h)
			g.has[l] = false
		}
	}
	for i, w := range g.w {
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := g.files[i].Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

// commitMarker commits the last leaf as the log of record's last batch, so a
// restarted sequencer finds the stream and the store at the same size.
func commitMarker(t testing.TB, dir string, n uint64) {
	srv, err := natsembed.Start(natsembed.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	nc, err := natsembed.Connect(srv, "large-test", pipeline.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if err := pipeline.EnsureStreams(ctx, js, pipeline.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	b := &pipeline.Batch{First: n - 1, Leaves: []pipeline.Leaf{pipeline.NewLeaf(largeLeaf(nil, n-1))}}
	m := nats.NewMsg(pipeline.LeavesSubject("default"))
	m.Data = b.Encode()
	m.Header.Set(pipeline.HeaderFirst, strconv.FormatUint(n-1, 10))
	m.Header.Set(pipeline.HeaderCount, "1")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
}

// TestLargeLogFlatMemory grows the log and checks it at each size (see above).
func TestLargeLogFlatMemory(t *testing.T) {
	if os.Getenv("SVC_LARGE_CHILD") != "" {
		t.Skip("the child process of TestLargeLogFlatMemory runs in TestLargeLogChild")
	}
	sizes := []uint64{1_000_000, 10_000_000}
	if v := os.Getenv("SVC_LARGE_SIZES"); v != "" {
		sizes = nil
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
			if err != nil || n < 2 {
				t.Fatalf("SVC_LARGE_SIZES=%q: want sizes of at least 2, comma-separated", v)
			}
			sizes = append(sizes, n)
		}
	}
	dir := t.TempDir()
	treeDir := filepath.Join(dir, "tenants", "default", "tree")
	if err := os.MkdirAll(treeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	g := &grower{dir: treeDir}
	defer func() {
		for _, f := range g.files {
			f.Close()
		}
	}()
	key := largeKey(t)
	for _, n := range sizes {
		start := time.Now()
		g.growTo(t, n)
		grown := time.Since(start)
		commitMarker(t, dir, n)
		r := runLargeChild(t, dir, n, key)
		t.Logf("size %11d: grown in %6.1fs; restart %6.0f ms; RSS %4d MiB (peak %4d MiB); %d sampled inclusion proofs and a consistency proof checked through the tiles",
			n, grown.Seconds(), r.RestartMs, r.RSSKB/1024, r.HWMKB/1024, r.Checked)
	}
}

// largeResult is what the parent learns about one size.
type largeResult struct {
	RestartMs float64
	RSSKB     int
	HWMKB     int
	Checked   int
}

// runLargeChild restarts the log in a child process, checks it through the tiles and
// returns the child's restart time and RSS.
func runLargeChild(t *testing.T, dir string, n uint64, key *signer.Key) largeResult {
	cmd := exec.Command(os.Args[0], "-test.run=^TestLargeLogChild$", "-test.v")
	cmd.Env = append(os.Environ(), "SVC_LARGE_CHILD="+dir)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	lines := bufio.NewScanner(stdout)
	next := func() map[string]string {
		for lines.Scan() {
			if rest, ok := strings.CutPrefix(lines.Text(), "LARGE "); ok {
				var m map[string]string
				if err := json.Unmarshal([]byte(rest), &m); err != nil {
					t.Fatal(err)
				}
				return m
			}
		}
		t.Fatalf("the child ended without a report: %v", lines.Err())
		return nil
	}
	ready := next()
	if ready["error"] != "" {
		t.Fatalf("child: %s", ready["error"])
	}
	base := ready["url"]
	var res largeResult
	res.RestartMs, _ = strconv.ParseFloat(ready["restartMs"], 64)

	// Trust only the signed head; read everything else through the tiles.
	code, _, body := get(t, base+"/head", "")
	var head struct{ TreeHead *receipt.Envelope }
	if code != 200 || json.Unmarshal([]byte(body), &head) != nil || head.TreeHead == nil {
		t.Fatalf("/head: %d %s", code, body)
	}
	if _, err := head.TreeHead.Verify([]signer.PublicKey{key.Public()}); err != nil {
		t.Fatalf("head: %v", err)
	}
	th, err := receipt.DecodeTreeHead(head.TreeHead)
	if err != nil {
		t.Fatal(err)
	}
	root, err := merkle.ParseHash(th.RootHash)
	if err != nil || th.TreeSize != n {
		t.Fatalf("head of size %d (%v), want %d", th.TreeSize, err, n)
	}
	tree := tlog.Tree{N: int64(n), Hash: tlog.Hash(root)}
	hr := tlog.TileHashReader(tree, testkit.C2SPTiles{T: t, Base: base})
	rng := rand.New(rand.NewPCG(n, 14))
	samples := []uint64{0, n / 2, n - 1}
	for len(samples) < 20 {
		samples = append(samples, rng.Uint64N(n))
	}
	for _, i := range samples {
		proof, err := tlog.ProveRecord(tree.N, int64(i), hr)
		if err != nil {
			t.Fatalf("size %d: inclusion proof of %d from the tiles: %v", n, i, err)
		}
		if err := tlog.CheckRecord(proof, tree.N, tree.Hash, int64(i), tlog.RecordHash(largeLeaf(nil, i))); err != nil {
			t.Fatalf("size %d: inclusion of %d: %v", n, i, err)
		}
		res.Checked++
	}
	old := int64(rng.Uint64N(n-1) + 1)
	oldRoot := rootAt(t, base, old)
	proof, err := tlog.ProveTree(tree.N, old, hr)
	if err != nil {
		t.Fatalf("size %d: consistency proof from %d: %v", n, old, err)
	}
	if err := tlog.CheckTree(proof, tree.N, tree.Hash, old, oldRoot); err != nil {
		t.Fatalf("size %d: consistency from %d: %v", n, old, err)
	}
	stdin.Close()
	done := next()
	res.RSSKB, _ = strconv.Atoi(done["rssKB"])
	res.HWMKB, _ = strconv.Atoi(done["hwmKB"])
	return res
}

// TestLargeLogChild is the child process of TestLargeLogFlatMemory: it restarts the
// log in SVC_LARGE_CHILD (the embedded broker, the sequencer's recovery), serves it,
// and reports its restart time, then its RSS once stdin closes.
func TestLargeLogChild(t *testing.T) {
	dir := os.Getenv("SVC_LARGE_CHILD")
	if dir == "" {
		t.Skip("runs only as the child process of TestLargeLogFlatMemory")
	}
	report := func(kv ...string) {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		b, _ := json.Marshal(m)
		fmt.Printf("LARGE %s\n", b)
	}
	fail := func(err error) {
		report("error", err.Error())
		t.Fatal(err)
	}
	key := largeKey(t)
	start := time.Now()
	srv, err := natsembed.Start(natsembed.Config{DataDir: dir})
	if err != nil {
		fail(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	nc, err := natsembed.Connect(srv, "large-child", pipeline.Credentials{})
	if err != nil {
		fail(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if err := pipeline.EnsureStreams(context.Background(), js, pipeline.StreamConfig{}); err != nil {
		fail(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sg := receipt.KeySigner{Key: key}
	seq, err := sequencer.New(sequencer.Config{Tenant: "default", Conn: nc, Dir: filepath.Join(dir, "tenants", "default"), Signer: sg, Logger: quiet})
	if err != nil {
		fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- seq.Run(ctx) }()
	select {
	case <-seq.Ready():
	case err := <-errc:
		fail(fmt.Errorf("sequencer: %w", err))
	}
	restart := time.Since(start)
	if seq.Replayed() != 0 {
		fail(fmt.Errorf("the restart replayed %d leaves; the fast path left the store behind the stream", seq.Replayed()))
	}
	ac, err := pipeline.NewClient(nc, pipeline.ClientConfig{Retries: -1})
	if err != nil {
		fail(err)
	}
	doc := &signer.KeyDocument{Keys: []signer.KeyEntry{key.Public().Entry(time.Now().Add(-time.Hour), nil)}}
	hs, err := logserver.New(logserver.Config{Append: ac, Logger: quiet, Tenants: []*logserver.Tenant{{
		ID: "default", Tree: seq.Tree(), Signer: sg,
		Keys: func(context.Context) (*signer.KeyDocument, error) { return doc, nil },
	}}})
	if err != nil {
		fail(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	go http.Serve(ln, hs)
	report("url", "http://"+ln.Addr().String(), "restartMs", strconv.FormatFloat(float64(restart.Microseconds())/1000, 'f', 1, 64))
	_, _ = io.Copy(io.Discard, os.Stdin) // the parent checks the log, then closes stdin
	status, _ := os.ReadFile("/proc/self/status")
	rss, hwm := procKB(string(status), "VmRSS:"), procKB(string(status), "VmHWM:")
	cancel()
	<-errc
	if err := seq.Close(); err != nil {
		fail(err)
	}
	report("rssKB", strconv.Itoa(rss), "hwmKB", strconv.Itoa(hwm))
}

func procKB(status, field string) int {
	for _, line := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return n
		}
	}
	return 0
}
