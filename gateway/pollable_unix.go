//go:build unix && !aix

package gateway

import (
	"os"

	"golang.org/x/sys/unix"
)

// PollableInput returns a File that reads f's descriptor through the Go runtime's
// poller when f is a pipe or a socket (as an agent's stdin is), else f itself.
//
// The runtime opens stdin in blocking mode, so a goroutine waiting for the agent's
// next line holds a thread, and its processor, in read(2). Whenever the other
// processor is busy, the runtime's monitor takes the waiting one back, and every time
// it does so it keeps waking every 20 µs instead of backing off to 10 ms: with the
// stdio gateway one call at a time, half of the process's context switches were the
// monitor's sleeps (perf record -e sched:sched_switch). Through the poller the
// reader parks like any goroutine waiting on a socket and holds nothing.
//
// The File returned reads a duplicate of f's descriptor (the original may be known
// to the poller already), and the pipe is put in non-blocking mode: a pipe's or
// socket's read end is the gateway's alone, so nobody else sees the change, but f
// must not be read after this.
func PollableInput(f *os.File) *os.File {
	st, err := f.Stat()
	if err != nil || st.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
		return f
	}
	raw, err := f.SyscallConn()
	if err != nil {
		return f
	}
	dup := -1
	if err := raw.Control(func(fd uintptr) {
		dup, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil || dup < 0 {
		return f
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		return f
	}
	return os.NewFile(uintptr(dup), f.Name())
}
