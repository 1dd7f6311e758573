package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// buildSvcInto builds svc into <dir>/bin/svc, as the README's build does.
func buildSvcInto(t *testing.T, dir string) {
	t.Helper()
	out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "bin", "svc"), "svc.dev/svc/cmd/svc").CombinedOutput()
	if err != nil {
		t.Fatalf("go build svc: %v\n%s", err, out)
	}
}

// upProc is a running `bin/svc up` and what it printed up to its last startup line.
type upProc struct {
	cmd    *exec.Cmd
	done   chan error
	output string
}

// startUp runs bin/svc up in dir with args and returns once its startup lines are
// printed, or with the process's end (output holds what it printed) when it failed.
func startUp(t *testing.T, dir string, env []string, args ...string) *upProc {
	t.Helper()
	cmd := exec.Command(filepath.Join("bin", "svc"), append([]string{"up", "--data", "data"}, args...)...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &upProc{cmd: cmd, done: make(chan error, 1)}
	lines := make(chan string, 1024) // never blocks the reader, so Wait runs
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		for range lines {
		}
	})
	var out strings.Builder
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok { // the process ended: stderr is complete only once Wait returned
				err := <-p.done
				p.done <- err
				p.output = out.String() + stderr.String()
				return p
			}
			out.WriteString(l + "\n")
			if strings.HasPrefix(l, "  --log-key ") { // the last startup line
				p.output = out.String()
				return p
			}
		case <-timeout:
			t.Fatalf("svc up printed no startup lines within 60 s:\n%s\n%s", out.String(), stderr.String())
		}
	}
}

// stop ends the process with SIGINT and waits for it.
func (p *upProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("svc up did not stop within 30 s of SIGINT")
	}
}

// printedCommands are the command lines in svc's output (lines starting with two
// spaces then bin/svc or curl; a trailing backslash continues a line).
func printedCommands(out string) []string {
	var cmds []string
	var cur string
	for _, l := range strings.Split(out, "\n") {
		if cur != "" {
			cur += "\n" + l
		} else if strings.HasPrefix(l, "  bin/svc ") || strings.HasPrefix(l, "  curl ") {
			cur = l
		}
		if cur != "" && !strings.HasSuffix(l, `\`) {
			cmds = append(cmds, strings.TrimSpace(cur))
			cur = ""
		}
	}
	return cmds
}

// printedURLs are the URLs of svc up's summary (the lines before the first blank
// line after "svc is up."), except those printed as "POST <url>".
func printedURLs(out string) []string {
	_, after, _ := strings.Cut(out, "svc is up.\n\n")
	head, _, _ := strings.Cut(after, "\n\n")
	var urls []string
	for _, m := range regexp.MustCompile(`(POST )?(http://[^\s)'"]+)`).FindAllStringSubmatch(head, -1) {
		if m[1] == "" {
			urls = append(urls, m[2])
		}
	}
	return urls
}

// runPrinted runs one printed command with sh in dir and returns its output.
func runPrinted(t *testing.T, dir string, env []string, command string) string {
	t.Helper()
	c := exec.Command("sh", "-c", command)
	c.Dir, c.Env = dir, append(os.Environ(), env...)
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("printed command failed as pasted: %v\n%s\n%s", err, command, out)
	}
	return string(out)
}

// waitOK polls url until it answers 200 or the deadline passes.
func waitOK(t *testing.T, url string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: %d %s (want 200 within %s)", url, resp.StatusCode, body, within)
			}
		} else if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestUpPrintedCommandsRun: what `svc up` prints runs and opens as printed, on the
// first start and on a restart; a start that failed (its port taken) keeps no token,
// so the next start prints one; a new log's first checkpoint follows its first
// append (latest.json, /checkpoint, svc log-check all pass within seconds, not after
// --checkpoint-every).
func TestUpPrintedCommandsRun(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is not installed: go tool task setup installs it")
	}
	dir := t.TempDir()
	buildSvcInto(t, dir)

	// A start whose port is taken fails and keeps no token.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	failed := startUp(t, dir, nil, "--port", fmt.Sprint(busy.Addr().(*net.TCPAddr).Port))
	if err := <-failed.done; err == nil || !strings.Contains(failed.output, "pick another --port") {
		t.Fatalf("svc up on a taken port: %v\n%s", err, failed.output)
	}
	busy.Close()
	if _, err := os.Stat(filepath.Join(dir, "data", "token.sha256")); err == nil {
		t.Fatal("a start that failed kept a token hash; the next start would print none")
	}

	first := startUp(t, dir, nil, "--port", "0")
	m := regexp.MustCompile(`bearer token \(shown once.*\n\s+([0-9a-f]{64})\n`).FindStringSubmatch(first.output)
	if m == nil {
		t.Fatalf("the first start printed no token:\n%s", first.output)
	}
	token := m[1]
	if strings.Contains(first.output, "<") {
		t.Errorf("the startup lines carry a placeholder:\n%s", first.output)
	}
	if !strings.Contains(first.output, "the first as soon as the log grows") {
		t.Errorf("the startup lines do not say when the first checkpoint is due:\n%s", first.output)
	}
	checkPrinted(t, dir, nil, first.output)
	first.stop(t)

	// A restart: the token is the first one's, named by SVC_LOG_TOKEN in the commands.
	second := startUp(t, dir, nil, "--port", "0")
	if strings.Contains(second.output, token) || !strings.Contains(second.output, "SVC_LOG_TOKEN") {
		t.Fatalf("the restart's lines:\n%s", second.output)
	}
	checkPrinted(t, dir, []string{"SVC_LOG_TOKEN=" + token}, second.output)
}

// checkPrinted opens every URL of svc up's summary and runs every printed command:
// first the appends (which must be taken), then, once the first checkpoint is out,
// the rest (log-check must pass).
func checkPrinted(t *testing.T, dir string, env []string, out string) {
	t.Helper()
	cmds := printedCommands(out)
	if len(cmds) < 2 {
		t.Fatalf("want an append and a log-check among the printed commands, got %q in\n%s", cmds, out)
	}
	for _, c := range cmds {
		if strings.HasPrefix(c, "curl ") {
			if got := runPrinted(t, dir, env, c); !strings.Contains(got, `"inclusion"`) {
				t.Fatalf("%s\nanswered %s", c, got)
			}
		}
	}
	urls := printedURLs(out)
	if len(urls) < 3 {
		t.Fatalf("want the head, key document and latest.json among the summary's URLs, got %q", urls)
	}
	base := regexp.MustCompile(`--log-url (\S+)`).FindStringSubmatch(out)[1]
	for _, u := range append(urls, base+"/checkpoint") {
		waitOK(t, u, 15*time.Second) // latest.json and /checkpoint: the first checkpoint
	}
	for _, c := range cmds {
		if !strings.HasPrefix(c, "curl ") {
			if got := runPrinted(t, dir, env, c); strings.Contains(got, "FAIL") {
				t.Fatalf("%s\n%s", c, got)
			}
		}
	}
}
