// Command tti measures a log's time to integrate from outside, beside a load (the
// race script, bench/race/hammer.sh, runs it next to Tessera's hammer): every
// --every it POSTs a unique entry to <url>/add and records when the answer came
// and when the log's /checkpoint, polled every --poll, first covered the entry's
// index. A log whose answer already carries an inclusion proof under a signed head
// covering the entry (ours: the second line of the answer) has integrated it when it
// answers; for a log that answers only the index (Tessera) integration is when a
// published checkpoint covers it. It prints percentiles of both, one line:
//
//	tti --url http://127.0.0.1:8080 --duration 30s
//
// The load it adds is small (--every 20ms: 50 appends and at most 1/poll checkpoint
// reads a second) and the same for every log raced.
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
	"sync"
	"time"
)

// probe is one entry appended and what happened to it.
type probe struct {
	sent     time.Time
	answered time.Duration // 0 until answered
	proven   bool          // the answer carried an inclusion proof covering the index
	index    uint64
	visible  time.Duration // until a checkpoint covered the index; 0 until then
}

type prober struct {
	url    string
	hc     *http.Client
	mu     sync.Mutex
	probes []*probe
	failed int
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
	p := &prober{url: *url, hc: &http.Client{Timeout: 30 * time.Second}}
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
	for !p.allVisible() && time.Now().Before(deadline) {
		time.Sleep(*poll)
	}
	stopPolling()
	<-polled
	fmt.Println(p.report(*label))
}

func (p *prober) allVisible() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pr := range p.probes {
		if pr.visible == 0 {
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
		p.fail()
		return
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		p.fail()
		return
	}
	data, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		p.fail()
		return
	}
	took := time.Since(pr.sent)
	line, rest, _ := bytes.Cut(data, []byte("\n"))
	if pr.index, err = strconv.ParseUint(string(bytes.TrimSpace(line)), 10, 64); err != nil {
		p.fail()
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

func (p *prober) fail() {
	p.mu.Lock()
	p.failed++
	p.mu.Unlock()
}

// pollCheckpoints reads /checkpoint every poll and marks the probes it covers.
func (p *prober) pollCheckpoints(ctx context.Context, poll time.Duration) {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		if size, err := p.checkpointSize(ctx); err == nil {
			now := time.Now()
			p.mu.Lock()
			for _, pr := range p.probes {
				if pr.visible == 0 && pr.index < size {
					pr.visible = now.Sub(pr.sent)
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

// checkpointSize reads the tree size of the log's latest checkpoint (a C2SP signed
// note: origin, size, root hash, a blank line, signatures).
func (p *prober) checkpointSize(ctx context.Context) (uint64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/checkpoint", nil)
	if err != nil {
		return 0, err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return 0, err
	}
	data, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0, errors.Join(err, fmt.Errorf("status %d", resp.StatusCode))
	}
	lines := bytes.SplitN(data, []byte("\n"), 3)
	if len(lines) < 3 {
		return 0, errors.New("checkpoint: too few lines")
	}
	return strconv.ParseUint(string(lines[1]), 10, 64)
}

// report is one line: probes, failures, and the percentiles of the answer, the
// integration (the answer when it carried a proof, else the checkpoint) and the
// checkpoint.
func (p *prober) report(label string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var answer, integrate, visible []time.Duration
	proven := 0
	for _, pr := range p.probes {
		answer = append(answer, pr.answered)
		if pr.visible > 0 {
			visible = append(visible, pr.visible)
		}
		switch {
		case pr.proven:
			proven++
			integrate = append(integrate, pr.answered)
		case pr.visible > 0:
			integrate = append(integrate, pr.visible)
		}
	}
	return fmt.Sprintf("%s probes=%d failed=%d proof_in_answer=%d answer[%s] integrated[%s] checkpoint[%s]",
		label, len(p.probes), p.failed, proven, pcts(answer), pcts(integrate), pcts(visible))
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
