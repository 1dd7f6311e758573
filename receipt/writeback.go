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
	bp := scratchBufs.Get().(*[]byte)
	out, ok := write((*bp)[:0])
	same := ok && bytes.Equal(out, data)
	if !ok {
		out = nil
	}
	putScratch(bp, out)
	return same
}

// scratchBufs lends buffers to writesBack and Envelope.LeafHash.
var scratchBufs = sync.Pool{New: func() any { return new([]byte) }}

// putScratch gives bp back to scratchBufs holding b's array (nil: its own), unless b
// grew over a megabyte.
func putScratch(bp *[]byte, b []byte) {
	if b != nil && cap(b) <= 1<<20 {
		*bp = b[:0]
	}
	scratchBufs.Put(bp)
}
