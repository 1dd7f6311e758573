package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/conformance"
	"svc.dev/svc/receipt"
)

// verifyStdin is where `svc verify -` reads bundle paths (a test swaps it).
var verifyStdin io.Reader = os.Stdin

// batchRun is `svc verify` over many bundles.
type batchRun struct {
	paths      []string
	json       bool
	html       string
	workers    int
	checkpoint string
}

// isBatch: several paths, a directory, "-" or an HTML report; one file keeps
// SPEC.md's single-bundle report.
func (b batchRun) isBatch() bool {
	if len(b.paths) != 1 || b.paths[0] == "-" || b.html != "" {
		return true
	}
	st, err := os.Stat(b.paths[0])
	return err == nil && st.IsDir()
}

func (b batchRun) run(ctx context.Context, opts conformance.Options, notes []string, stdout, stderr io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if os.Getenv("GOGC") == "" {
		// A batch allocates a few short-lived kilobytes per bundle; collecting a
		// quarter as often costs ~15 MB and saves 10-25% of the CPU time.
		debug.SetGCPercent(400)
	}
	batch := conformance.NewBatch(opts, conformance.BatchOptions{Workers: b.workers})
	paths := make(chan string, 1024)
	walkErr := make(chan error, 1)
	go func() {
		err := conformance.WalkBundles(ctx, b.paths, verifyStdin, paths, batch.Found)
		if err != nil {
			cancel()
		}
		walkErr <- err
	}()
	stopProgress := showProgress(batch, stderr)
	enc := json.NewEncoder(stdout)
	s, err := batch.Run(ctx, paths, func(r *conformance.BundleResult) error {
		switch {
		case b.json:
			return enc.Encode(r)
		case r.Error != "":
			_, err := fmt.Fprintf(stdout, "FAIL %s: %s: %s\n", r.Path, conformance.UnreadableFile, r.Error)
			return err
		case !r.Verified:
			_, err := fmt.Fprintf(stdout, "FAIL %s: %s: %s\n", r.Path, r.FailedCheck, r.Detail)
			return err
		}
		return nil
	})
	stopProgress()
	if werr := <-walkErr; werr != nil {
		return fmt.Errorf("finding bundles: %w (nothing was reported for the bundles after it)", werr)
	}
	if err != nil {
		return err
	}
	if b.json {
		err = s.WriteJSONLine(stdout)
	} else {
		err = s.WriteText(stdout)
		for _, n := range notes {
			fmt.Fprintf(stdout, "NOTE: %s\n", n)
		}
	}
	if err != nil {
		return err
	}
	if b.html != "" {
		if err := b.writeHTML(s, opts); err != nil {
			return err
		}
	}
	if s.Failed > 0 || s.Bundles == 0 {
		if s.Bundles == 0 {
			fmt.Fprintln(stderr, "svc verify: no bundles found (a directory is searched for *.json files)")
		}
		return exitCode(1)
	}
	return nil
}

func (b batchRun) writeHTML(s *conformance.Summary, opts conformance.Options) error {
	info := conformance.HTMLInfo{Generated: time.Now(), Inputs: b.paths, Checkpoint: b.checkpoint}
	for _, k := range opts.IssuerKeys {
		info.Keys = append(info.Keys, "issuer key "+k.KeyID)
	}
	for _, k := range opts.PrincipalKeys {
		info.Keys = append(info.Keys, "principal key "+k.KeyID)
	}
	for _, k := range opts.LogKeys {
		info.Keys = append(info.Keys, "log key "+k.KeyID)
	}
	for _, k := range opts.WitnessKeys {
		info.Keys = append(info.Keys, "witness key "+k.KeyID)
	}
	var buf strings.Builder
	if err := s.WriteHTML(&buf, info); err != nil {
		return err
	}
	return receipt.WriteFileAtomic(b.html, []byte(buf.String()), 0o644)
}

// showProgress redraws one progress line on stderr while a batch runs, when stderr is
// a terminal; the returned func stops and clears it.
func showProgress(batch *conformance.Batch, stderr io.Writer) func() {
	f, ok := stderr.(*os.File)
	if !ok {
		return func() {}
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return func() {}
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(stopped)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(f, "\r\033[K")
				return
			case <-t.C:
				p := batch.Progress()
				rate := float64(p.Done) / time.Since(start).Seconds()
				bar := progressBar(p.Done, p.Found, 30)
				fmt.Fprintf(f, "\r\033[K%s %d/%d bundles, %d failed, %.0f/s", bar, p.Done, p.Found, p.Failed, rate)
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// progressBar draws done of total (total still growing while bundles are found).
func progressBar(done, total int64, width int) string {
	n := 0
	if total > 0 {
		n = int(int64(width) * done / total)
	}
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}

// loadCheckpoint reads the checkpoint every receipt's head must be consistent with:
// from a file or a URL, in any form ReadHeadFile reads. It needs witness keys (from
// --witness-key or --witness-url) and a consistency source (--log or --log-url).
func loadCheckpoint(ctx context.Context, where string, opts *conformance.Options) error {
	if len(opts.WitnessKeys) == 0 {
		return usagef("--checkpoint needs --witness-key (or --witness-url): the checkpoint must be countersigned by a witness you trust")
	}
	var env *receipt.Envelope
	var err error
	if strings.HasPrefix(where, "https://") || strings.HasPrefix(where, "http://") {
		var data []byte
		if data, err = client.Fetch(ctx, nil, where, client.MaxCheckpointSize, nil); err == nil {
			env, err = conformance.ParseHead(data)
		}
	} else {
		env, err = conformance.ReadHeadFile(where)
	}
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", where, err)
	}
	opts.WitnessHead = env
	if src, ok := opts.Log.(conformance.ConsistencySource); ok {
		opts.WitnessLog = src
		return nil
	}
	return usagef("--checkpoint needs --log <file> or --log-url <url> to prove each head consistent with it")
}
