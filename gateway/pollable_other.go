//go:build !unix || aix

package gateway

import "os"

// PollableInput returns f: the poller's pipes are a unix matter (see
// pollable_unix.go).
func PollableInput(f *os.File) *os.File { return f }
