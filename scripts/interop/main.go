// Command interop runs svc's C2SP pieces against implementations nobody here wrote,
// built from their public source outside the repository (go tool task interop):
//
//   - litewitness (filippo.io/torchwood) cosigns svc log's C2SP checkpoints, which svc
//     log sends it itself (--witness-add-checkpoint); the cosigned checkpoints, read
//     from the log's public /checkpoint, are verified with golang.org/x/mod/sumdb/note
//     (the log's key and litewitness's tlog-cosignature/v1 key);
//   - svc witness --listen cosigns a Tessera POSIX log (transparency-dev/tessera's
//     conformance server) while Tessera's hammer writes to it; the consistency proofs
//     come from Tessera's own tiles (golang.org/x/mod/sumdb/tlog) and each cosignature
//     is verified with x/mod's note;
//   - transparency-dev/witness's omniwitness cosigns svc log's checkpoints as
//     litewitness does (the log added with --additional_logs).
//
// Peers are built with go install / go build under -peers (default
// /tmp/svc-interop-peers), never inside the repository; a peer the module proxy cannot
// build is reported with the proxy's or the toolchain's own words. The report (markdown)
// goes to stdout and, with -out, to a file.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Versions built. litewitness@latest (v0.10.0) needs go >= 1.27; v0.6.1 is the newest
// that builds with the toolchain of go.mod.
const (
	torchwoodVersion = "v0.6.1"
	tesseraVersion   = "v1.0.4"
)

func main() {
	peers := flag.String("peers", "/tmp/svc-interop-peers", "`directory` the peers are built in (outside the repository)")
	out := flag.String("out", "", "also write the report to this `file`")
	leaves := flag.Int("leaves", 2000, "leaves Tessera's hammer writes")
	flag.Parse()
	r := &report{start: time.Now(), peers: *peers}
	dir, err := os.MkdirTemp("", "svc-interop-")
	check(err)
	defer os.RemoveAll(dir)
	defer r.stopAll()
	b := &builder{peers: *peers, r: r}
	svcBin := b.svc(dir)
	lw, ctl := b.torchwood()
	posix, hammer := b.tessera()
	omni := b.omniwitness()
	if svcBin != "" && lw != "" && ctl != "" {
		r.section("litewitness cosigns svc log's checkpoints", func() error { return runLitewitness(r, dir, svcBin, lw, ctl) })
	}
	if svcBin != "" && omni != "" {
		r.section("omniwitness (transparency-dev/witness) cosigns svc log's checkpoints", func() error { return runOmniwitness(r, dir, svcBin, omni) })
	}
	if svcBin != "" && posix != "" && hammer != "" {
		r.section("svc witness cosigns a Tessera POSIX log under its hammer", func() error { return runTessera(r, dir, svcBin, posix, hammer, *leaves) })
	}
	text := r.markdown()
	fmt.Print(text)
	if *out != "" {
		check(os.WriteFile(*out, []byte(text), 0o644))
	}
	if r.failed {
		os.Exit(1)
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "interop:", err)
		os.Exit(1)
	}
}

// report collects what each part did.
type report struct {
	start  time.Time
	peers  string
	lines  []string
	failed bool
	stops  []func()
}

func (r *report) say(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	r.lines = append(r.lines, line)
	fmt.Fprintln(os.Stderr, line)
}

func (r *report) section(title string, f func() error) {
	r.say("\n## %s\n", title)
	t := time.Now()
	if err := f(); err != nil {
		r.failed = true
		r.say("- **FAILED**: %v", err)
		return
	}
	r.say("- passed in %s", time.Since(t).Round(time.Millisecond))
}

func (r *report) stopAll() {
	for i := len(r.stops) - 1; i >= 0; i-- {
		r.stops[i]()
	}
}

func (r *report) markdown() string {
	load := "unknown"
	if data, err := os.ReadFile("/proc/loadavg"); err == nil && len(strings.Fields(string(data))) >= 3 {
		load = strings.Join(strings.Fields(string(data))[:3], " ")
	}
	head := fmt.Sprintf("# C2SP interop run\n\n- date: %s\n- command: `go tool task interop` (`go run ./scripts/interop -peers <dir>`)\n- machine: %s/%s, %d cores, load average at the end %s\n- peers built under %s, outside the repository\n",
		r.start.UTC().Format(time.RFC3339), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), load, filepath.Clean(r.peers))
	return head + strings.Join(r.lines, "\n") + "\n"
}
