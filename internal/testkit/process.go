package testkit

import (
	"bufio"
	"os/exec"
	"regexp"
	"testing"
	"time"
)

// StartProcess starts cmd (a server run as its own process) and waits up to a minute
// for a line of its stderr that matches re; it returns that line's last submatch
// (where the server listens). The process is killed when the test ends. The test
// fails, with what the process wrote, if it exits or stays silent before such a line.
func StartProcess(t testing.TB, cmd *exec.Cmd, re *regexp.Regexp) string {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	found := make(chan string, 1)
	seen := &LockedBuffer{}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			seen.Write([]byte(sc.Text() + "\n"))
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[len(m)-1]:
				default:
				}
			}
		}
		close(found)
	}()
	select {
	case s, ok := <-found:
		if !ok {
			t.Fatalf("%s exited before it listened:\n%s", cmd.Path, seen)
		}
		return s
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not start within 60 s:\n%s", cmd.Path, seen)
	}
	return ""
}
