package receipt

import (
	"bytes"
	"sync"
)

// writesBack reports whether write, given an empty buffer, writes data byte for byte:
// how the strict parsers accept what they read (only a form they would write
// themselves). The buffer is lent by a pool, since a batch verifier does this twice
// for every bundle; write must not keep it.
func writesBack(data []byte, write func(b []byte) ([]byte, bool)) bool {
	bp := writeBackBufs.Get().(*[]byte)
	out, ok := write((*bp)[:0])
	same := ok && bytes.Equal(out, data)
	if ok && cap(out) <= maxWriteBackBuf {
		*bp = out[:0]
	}
	writeBackBufs.Put(bp)
	return same
}

// writeBackBufs holds writesBack's buffers; one grown over maxWriteBackBuf is not kept.
var writeBackBufs = sync.Pool{New: func() any { return new([]byte) }}

const maxWriteBackBuf = 1 << 20
