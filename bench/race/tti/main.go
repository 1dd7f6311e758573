// Command tti measures a log's time to integrate from outside, beside a load (the
// race script, bench/race/hammer.sh, runs it next to Tessera's hammer): every
// --every it POSTs a unique entry to <url>/add and records three times, each under
// its own name, the same way for every log raced:
//
//   - answer: until the /add answer came.
//   - proof_in_hand: until the writer holds an inclusion proof of its entry under a
//     tree head: the answer itself when it carries one (svc: its second line),
//     else the tiles proof below (Tessera answers only the index).
//   - checkpoint: until the log's published /checkpoint, polled every --poll, first
//     covered the entry's index.
//   - tiles: until an inclusion proof was built from the log's C2SP tiles
//     (/tile/...) under the first checkpoint covering the index, checked against
//     that checkpoint's root hash. Done for every probe of every log, so the reads
//     it adds are the same for all.
//
// It prints percentiles of each, one line:
//
//	tti --url http://127.0.0.1:8080 --duration 30s
//
// The load it adds is small (--every 20ms: 50 appends a second, at most 1/poll
// checkpoint reads and a few tile reads per append) and the same for every log raced.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/tlog"
)

// probe is one entry appended and what happened to it.
type probe struct {
	sent     time.Time
	answered time.Duration // 0 until answered
	proven   bool          // the answer carried an inclusion proof covering the index
	index    uint64
	visible  time.Duration // until a checkpoint covered the index; 0 until then
	tiled    time.Duration // until a proof was built from the tiles; 0 until then
	proving  bool          // a tiles proof is under way
}

type prober struct {
	url    string
	hc     *http.Client
	mu     sync.Mutex
	probes []*probe
	failed int
	// tileFailed counts tiles proofs that failed (retried at the next checkpoint).
	tileFailed int
	// lastFailure is why the last failed probe failed.
	lastFailure string
}

func main() {
	url := flag.String("url", "", "the log's base URL (its /add and /checkpoint)")
	every := flag.Duration("every", 20*time.Millisecond, "time between probes")
	poll := flag.Duration("poll", 5*time.Millisecond, "time between /checkpoint reads")
	duration := flag.Duration("duration", 30*time.Second, "how long to probe")
	label := flag.String("label", "", "a name for the output line")
	flag.Parse()
	if *url == "" || *every <= 0 || *poll <= 0 || *duration <= 0 {
		fmt.Fprintln(os.Stderr, "usage: tti --url <log base URL> [--every 20ms --poll 5ms --duration 30s --label name]")
		os.Exit(2)
	}
	// Connections are kept and reused, as the hammer's are: with the default two idle
	// connections a host, most probes would dial anew, and under load a log that caps
	// its connections per address answers the new ones 503 before the kept ones.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 128
	p := &prober{url: *url, hc: &http.Client{Timeout: 30 * time.Second, Transport: tr}}
	pollCtx, stopPolling := context.WithCancel(context.Background())
	polled := make(chan struct{})
	go func() { defer close(polled); p.pollCheckpoints(pollCtx, *poll) }()
	var adds sync.WaitGroup
	t := time.NewTicker(*every)
	defer t.Stop()
	for n, end := 0, time.Now().Add(*duration); time.Now().Before(end); n++ {
		adds.Add(1)
		go func(n int) { defer adds.Done(); p.add(n) }(n)
		<-t.C
	}
	adds.Wait()
	// Checkpoints come about once a second: give the last probes three.
	deadline := time.Now().Add(3 * time.Second)
	for !p.allDone() && time.Now().Before(deadline) {
		time.Sleep(*poll)
	}
	stopPolling()
	<-polled
	fmt.Println(p.report(*label))
}

func (p *prober) allDone() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pr := range p.probes {
		if pr.visible == 0 || pr.tiled == 0 {
			return false
		}
	}
	return true
}

// add appends the n-th probe entry.
func (p *prober) add(n int) {
	pr := &probe{sent: time.Now()}
	body := fmt.Sprintf("tti probe %d %d", pr.sent.UnixNano(), n)
	req, err := http.NewRequest(http.MethodPost, p.url+"/add", bytes.NewBufferString(body))
	if err != nil {
		p.fail(err.Error())
		return
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		p.fail(err.Error())
		return
	}
	data, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		p.fail(fmt.Sprintf("status %d: %.80q", resp.StatusCode, data))
		return
	}
	took := time.Since(pr.sent)
	line, rest, _ := bytes.Cut(data, []byte("\n"))
	if pr.index, err = strconv.ParseUint(string(bytes.TrimSpace(line)), 10, 64); err != nil {
		p.fail("answer without an index: " + err.Error())
		return
	}
	pr.answered, pr.proven = took, provesIndex(rest, pr.index)
	p.mu.Lock()
	p.probes = append(p.probes, pr)
	p.mu.Unlock()
}

// provesIndex says whether the rest of an /add answer is an inclusion proof of index
// under a signed head ({"inclusion":{"leafIndex","treeSize",...},"treeHead":{...}}).
// It checks the shape and the sizes, not the signature: the race measures time; the
// tests check the proofs.
func provesIndex(rest []byte, index uint64) bool {
	var a struct {
		Inclusion *struct {
			LeafIndex uint64 `json:"leafIndex"`
			TreeSize  uint64 `json:"treeSize"`
		} `json:"inclusion"`
		TreeHead json.RawMessage `json:"treeHead"`
	}
	if json.Unmarshal(bytes.TrimSpace(rest), &a) != nil || a.Inclusion == nil || len(a.TreeHead) == 0 {
		return false
	}
	return a.Inclusion.LeafIndex == index && a.Inclusion.TreeSize > index
}

// fail counts a probe that got no index, keeping the last reason.
func (p *prober) fail(why string) {
	p.mu.Lock()
	p.failed++
	p.lastFailure = why
	p.mu.Unlock()
}

// pollCheckpoints reads /checkpoint every poll and marks the probes it covers.
func (p *prober) pollCheckpoints(ctx context.Context, poll time.Duration) {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		if head, err := p.checkpoint(ctx); err == nil {
			now := time.Now()
			p.mu.Lock()
			for _, pr := range p.probes {
				if pr.visible == 0 && pr.index < uint64(head.N) {
					pr.visible = now.Sub(pr.sent)
				}
				if !pr.proving && pr.index < uint64(head.N) {
					pr.proving = true
					go p.proveFromTiles(ctx, pr, head)
				}
			}
			p.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkpoint reads the log's latest checkpoint (a C2SP signed note: origin, size,
// base64 root hash, a blank line, signatures) as a tree: its size and root hash.
func (p *prober) checkpoint(ctx context.Context) (tlog.Tree, error) {
	data, err := p.get(ctx, "/checkpoint")
	if err != nil {
		return tlog.Tree{}, err
	}
	lines := bytes.SplitN(data, []byte("\n"), 4)
	if len(lines) < 4 {
		return tlog.Tree{}, errors.New("checkpoint: too few lines")
	}
	size, err := strconv.ParseInt(string(lines[1]), 10, 64)
	if err != nil {
		return tlog.Tree{}, fmt.Errorf("checkpoint size: %w", err)
	}
	root, err := tlog.ParseHash(string(lines[2]))
	if err != nil {
		return tlog.Tree{}, fmt.Errorf("checkpoint root hash: %w", err)
	}
	return tlog.Tree{N: size, Hash: root}, nil
}

// get reads one path of the log.
func (p *prober) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, errors.Join(err, fmt.Errorf("%s: status %d", path, resp.StatusCode))
	}
	return data, nil
}

// proveFromTiles builds pr's inclusion proof under head from the log's tiles, as
// a writer that got only an index would, and records when it held it.
func (p *prober) proveFromTiles(ctx context.Context, pr *probe, head tlog.Tree) {
	tr := tileReader{ctx: ctx, p: p}
	proof, err := tlog.ProveRecord(head.N, int64(pr.index), tlog.TileHashReader(head, tr))
	if err == nil {
		var leaf []tlog.Hash
		if leaf, err = tlog.TileHashReader(head, tr).ReadHashes([]int64{tlog.StoredHashIndex(0, int64(pr.index))}); err == nil {
			err = tlog.CheckRecord(proof, head.N, head.Hash, int64(pr.index), leaf[0])
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.tileFailed++
		pr.proving = false // the next checkpoint tries again
		return
	}
	pr.tiled = time.Since(pr.sent)
}

// tileReader reads C2SP tlog-tiles (/tile/<L>/<N>[.p/<W>], height 8) over HTTP.
type tileReader struct {
	ctx context.Context
	p   *prober
}

func (tileReader) Height() int { return 8 }

func (r tileReader) ReadTiles(tiles []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(tiles))
	for i, t := range tiles {
		// x/mod names a tile tile/<H>/<L>/<N>; C2SP leaves the height out.
		data, err := r.p.get(r.ctx, "/tile/"+strings.TrimPrefix(t.Path(), "tile/8/"))
		if err != nil {
			return nil, err
		}
		if len(data) != t.W*tlog.HashSize {
			return nil, fmt.Errorf("tile %s: %d bytes, want %d", t.Path(), len(data), t.W*tlog.HashSize)
		}
		out[i] = data
	}
	return out, nil
}

func (tileReader) SaveTiles([]tlog.Tile, [][]byte) {}

// report is one line: probes, failures, and the percentiles of each measure under
// its own name (see the package doc).
func (p *prober) report(label string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var answer, inHand, visible, tiled []time.Duration
	proven := 0
	for _, pr := range p.probes {
		answer = append(answer, pr.answered)
		if pr.visible > 0 {
			visible = append(visible, pr.visible)
		}
		if pr.tiled > 0 {
			tiled = append(tiled, pr.tiled)
		}
		switch {
		case pr.proven:
			proven++
			inHand = append(inHand, pr.answered)
		case pr.tiled > 0:
			inHand = append(inHand, pr.tiled)
		}
	}
	line := fmt.Sprintf("%s probes=%d failed=%d tile_failures=%d proof_in_answer=%d answer[%s] proof_in_hand[%s] checkpoint[%s] tiles[%s]",
		label, len(p.probes), p.failed, p.tileFailed, proven, pcts(answer), pcts(inHand), pcts(visible), pcts(tiled))
	if p.lastFailure != "" {
		line += fmt.Sprintf(" last_failure=%q", p.lastFailure)
	}
	return line
}

// pcts formats p50/p90/p99/max.
func pcts(d []time.Duration) string {
	if len(d) == 0 {
		return "none"
	}
	slices.Sort(d)
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	ms := func(x time.Duration) string { return strconv.FormatFloat(float64(x)/1e6, 'f', 1, 64) }
	return fmt.Sprintf("p50=%sms p90=%sms p99=%sms max=%sms", ms(at(0.5)), ms(at(0.9)), ms(at(0.99)), ms(d[len(d)-1]))
}
