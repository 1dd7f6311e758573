//go:build unix

package logservice

import "syscall"

// fileLimit is the process's limit of open files (RLIMIT_NOFILE as the Go runtime
// raised it at start), 0 when unknown.
func fileLimit() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return int(min(rl.Cur, 1<<20))
}
