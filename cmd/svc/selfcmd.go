package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// selfCommand is how a user in this process's working directory runs this same
// binary, for the commands svc prints: "svc" when PATH finds it, "go run ./cmd/svc"
// under go run, else its path (relative when under the working directory, e.g.
// bin/svc after the README's build).
func selfCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return "svc"
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	if p, err := exec.LookPath("svc"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil && r == exe {
			return "svc"
		}
	}
	if strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return "go run ./cmd/svc"
	}
	if wd, err := os.Getwd(); err == nil {
		if r, err := filepath.EvalSymlinks(wd); err == nil {
			wd = r
		}
		if rel, err := filepath.Rel(wd, exe); err == nil && !strings.HasPrefix(rel, "..") {
			exe = rel
			if !strings.Contains(rel, string(filepath.Separator)) {
				exe = "." + string(filepath.Separator) + rel
			}
		}
	}
	return shellWord(exe)
}

// shellWord quotes s for a POSIX shell when it holds anything but plain path characters.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+:=@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
