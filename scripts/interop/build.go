package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// builder builds svc and the peers, each recorded in the report; a build that fails
// is reported with its last lines (what the proxy or the toolchain refused) and its
// parts are skipped.
type builder struct {
	peers string
	r     *report
}

// goCmd runs go with args in dir (the repository when empty), GOBIN set to the peers'
// bin, and returns its combined output.
func (b *builder) goCmd(dir string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOBIN="+filepath.Join(b.peers, "bin"), "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// tail is the last lines of a build's output.
func tail(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) > 4 {
		lines = lines[len(lines)-4:]
	}
	return "`" + strings.Join(lines, " / ") + "`"
}

func (b *builder) svc(dir string) string {
	bin := filepath.Join(dir, "svc")
	if out, err := b.goCmd("", "build", "-o", bin, "./cmd/svc"); err != nil {
		b.r.failed = true
		b.r.say("- svc did not build: %s", tail(out))
		return ""
	}
	return bin
}

// torchwood installs litewitness and witnessctl; "" for what did not build.
func (b *builder) torchwood() (lw, ctl string) {
	b.r.say("\n## Builds\n")
	mod := "filippo.io/torchwood/cmd/"
	latest, _ := b.goCmd(b.peers, "install", mod+"litewitness@latest")
	if strings.Contains(latest, "requires go") {
		b.r.say("- litewitness@latest refused: %s; building %s", tail(latest), torchwoodVersion)
	}
	out, err := b.goCmd(b.peers, "install", mod+"litewitness@"+torchwoodVersion)
	if err != nil {
		b.r.say("- litewitness %s did not build: %s", torchwoodVersion, tail(out))
		return "", ""
	}
	b.r.say("- litewitness %s (filippo.io/torchwood): `go install filippo.io/torchwood/cmd/litewitness@%s`", torchwoodVersion, torchwoodVersion)
	lw = filepath.Join(b.peers, "bin", "litewitness")
	if out, err := b.goCmd(b.peers, "install", mod+"witnessctl@"+torchwoodVersion); err != nil {
		// witnessctl needs sigsum.org/sigsum-go, which the proxy may refuse; its
		// add-log and add-key are two INSERTs into litewitness's database, made with
		// sqlite3 instead.
		b.r.say("- witnessctl %s did not build: %s; its add-log and add-key are done with sqlite3 (the same two INSERTs)", torchwoodVersion, tail(out))
		return lw, "sqlite3"
	}
	return lw, filepath.Join(b.peers, "bin", "witnessctl")
}

// tessera builds Tessera's POSIX conformance server and hammer from the module's
// source, copied out of the module cache under the peers directory.
func (b *builder) tessera() (posix, hammer string) {
	out, err := b.goCmd(b.peers, "mod", "download", "-json", "github.com/transparency-dev/tessera@"+tesseraVersion)
	var m struct{ Dir, Error string }
	if err != nil || json.Unmarshal([]byte(out), &m) != nil || m.Dir == "" {
		b.r.say("- Tessera %s could not be downloaded: %s", tesseraVersion, tail(out+m.Error))
		return "", ""
	}
	src := filepath.Join(b.peers, "tessera-"+tesseraVersion)
	if _, err := os.Stat(src); err != nil {
		if out, err := exec.Command("cp", "-r", m.Dir, src).CombinedOutput(); err != nil {
			b.r.say("- copying Tessera's source: %s", tail(string(out)))
			return "", ""
		}
		_ = exec.Command("chmod", "-R", "u+w", src).Run()
	}
	bin := filepath.Join(src, "bin") + "/"
	if out, err := b.goCmd(src, "build", "-o", bin, "./cmd/conformance/posix", "./internal/hammer"); err != nil {
		b.r.say("- Tessera's posix and hammer did not build: %s", tail(out))
		return "", ""
	}
	b.r.say("- Tessera %s POSIX conformance server and hammer: `go build ./cmd/conformance/posix ./internal/hammer` in its module source", tesseraVersion)
	return bin + "posix", bin + "hammer"
}

// omniwitness installs transparency-dev/witness's omniwitness; "" when it did not build.
func (b *builder) omniwitness() string {
	out, err := b.goCmd(b.peers, "install", "github.com/transparency-dev/witness/cmd/omniwitness@latest")
	if err != nil {
		b.r.say("- transparency-dev/witness omniwitness did not build: %s", tail(out))
		return ""
	}
	b.r.say("- transparency-dev/witness omniwitness: `go install github.com/transparency-dev/witness/cmd/omniwitness@latest`")
	return filepath.Join(b.peers, "bin", "omniwitness")
}

// start runs a peer process until the run ends; its output goes to dir/<name>.log.
func (r *report) startProc(dir, name string, env []string, bin string, args ...string) (*exec.Cmd, error) {
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	r.stops = append(r.stops, func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logf.Close() })
	return cmd, nil
}

// logTail is the end of a peer's log, for errors.
func logTail(dir, name string) string {
	data, _ := os.ReadFile(filepath.Join(dir, name+".log"))
	if i := bytes.LastIndexByte(data[:max(len(data)-1, 0)], '\n'); len(data) > 600 && i > 0 {
		data = data[len(data)-600:]
	}
	return string(data)
}
