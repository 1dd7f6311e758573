package projections

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/telemetry"
	"svc.dev/svc/merkle"
	"svc.dev/svc/pipeline"
)

// Entries keeps a tenant's C2SP tlog-tiles entry bundles (/tile/entries/<N>): bundle N
// holds leaves [256N, 256N+256) as committed, each as a big-endian uint16 length and
// the leaf's bytes. It follows the tenant's committed leaves and writes each full
// bundle to disk once, in Dir:
//
//	bundles.data   the bodies of the full bundles, back to back
//	bundles.idx    16 bytes a bundle: offset (uint64), length (uint32), flags (uint32)
//	state.json     how many bundles are durable and where in the stream to resume
//
// The leaves of the last, incomplete bundle (fewer than 256) are kept in memory and
// serve the partial bundles (/tile/entries/<N>.p/<W>), so memory stays flat in log
// size. A crash loses at most the bundles written since the last sync; Open cuts a
// torn record and Run rewrites what is missing from the stream.
//
// A leaf appended by hash only ({leafHash}) has no entry, and neither has a leaf longer
// than 65,535 bytes (the most a uint16 length can say): a bundle that holds one is not
// served (Bundle says which leaf, and that its hash is in the level-0 tile).
type Entries struct {
	Dir    string // required; created if needed
	Tenant string // required
	JS     jetstream.JetStream
	Logger *slog.Logger
	// Telemetry receives the projection's lag and broker retries; nil: none.
	Telemetry *telemetry.Telemetry
	// OnBatch, when set, is called with the stream sequence of each batch applied.
	OnBatch func(seq uint64)

	mu       sync.RWMutex
	data     *os.File
	idx      *os.File
	bundles  uint64 // full bundles on file
	dataEnd  int64
	tail     []tailEntry // the leaves of bundle `bundles`; fewer than 256
	tailSeq  uint64      // stream sequence of the batch holding tail[0]
	lastSeq  uint64      // the last batch applied
	unsynced int         // bundles written since the last sync
	lastSync time.Time
}

type tailEntry struct {
	data []byte // nil: appended by hash only
}

type entriesState struct {
	Bundles   uint64 `json:"bundles"`   // durable full bundles
	ResumeSeq uint64 `json:"resumeSeq"` // the stream sequence holding leaf 256*Bundles, or later
}

const (
	idxRecord    = 16
	flagHashOnly = 1 // the bundle holds a leaf appended by hash only; bits 8..15: its position
	syncBundles  = 64
	maxEntry     = 0xffff // C2SP entries carry a uint16 length
)

// ErrNoEntry wraps the reasons Bundle cannot serve a bundle; it wraps fs.ErrNotExist,
// so an HTTP front answers 404.
var ErrNoEntry = fmt.Errorf("entry bundle not available: %w", fs.ErrNotExist)

// Open opens (or creates) the bundle files and repairs a torn end.
func (e *Entries) Open() error {
	if e.Logger == nil {
		e.Logger = slog.Default()
	}
	if err := os.MkdirAll(e.Dir, 0o755); err != nil {
		return err
	}
	var err error
	if e.data, err = os.OpenFile(filepath.Join(e.Dir, "bundles.data"), os.O_RDWR|os.O_CREATE, 0o644); err != nil {
		return err
	}
	if e.idx, err = os.OpenFile(filepath.Join(e.Dir, "bundles.idx"), os.O_RDWR|os.O_CREATE, 0o644); err != nil {
		e.data.Close()
		return err
	}
	st, err := e.idx.Stat()
	if err != nil {
		return err
	}
	n := st.Size() / idxRecord
	if st.Size()%idxRecord != 0 {
		e.Logger.Warn("entry bundles: cutting a torn index record", "tenant", e.Tenant, "bytes", st.Size()%idxRecord)
	}
	ds, err := e.data.Stat()
	if err != nil {
		return err
	}
	// Keep the bundles whose data reached the disk (a crash can lose the data's tail
	// while the index kept its records); the rest are rewritten from the stream.
	for ; n > 0; n-- {
		off, length, _, err := e.record(uint64(n - 1))
		if err != nil {
			return err
		}
		if end := off + int64(length); end <= ds.Size() {
			e.dataEnd = end
			break
		}
	}
	if int64(n)*idxRecord != st.Size() {
		e.Logger.Warn("entry bundles: dropping index records past the data", "tenant", e.Tenant, "kept", n)
		if err := e.idx.Truncate(n * idxRecord); err != nil {
			return err
		}
	}
	e.bundles = uint64(n)
	if ds.Size() != e.dataEnd {
		if err := e.data.Truncate(e.dataEnd); err != nil {
			return err
		}
	}
	return nil
}

// record reads index record i.
func (e *Entries) record(i uint64) (off int64, length uint32, flags uint32, err error) {
	var rec [idxRecord]byte
	if _, err := e.idx.ReadAt(rec[:], int64(i)*idxRecord); err != nil {
		return 0, 0, 0, fmt.Errorf("entry bundle index %d: %w", i, err)
	}
	return int64(binary.BigEndian.Uint64(rec[0:8])), binary.BigEndian.Uint32(rec[8:12]), binary.BigEndian.Uint32(rec[12:16]), nil
}

// Close syncs and closes the files.
func (e *Entries) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.data == nil {
		return nil
	}
	err := e.syncLocked()
	err = errors.Join(err, e.data.Close(), e.idx.Close())
	e.data, e.idx = nil, nil
	return err
}

// Run follows the tenant's committed leaves until ctx ends. Open first.
func (e *Entries) Run(ctx context.Context) error {
	var st entriesState
	if err := loadState(filepath.Join(e.Dir, "state.json"), &st); err != nil {
		return fmt.Errorf("entry bundles %s: %w", e.Dir, err)
	}
	e.mu.RLock()
	have := e.bundles
	e.mu.RUnlock()
	start := st.ResumeSeq
	if st.Bundles > have || start == 0 {
		// The index lost bundles the state counted: read the stream from the start
		// (rare, and skipping is cheap).
		start = 1
	}
	err := Follow(telemetry.WithConsumer(ctx, "entries/"+e.Tenant), e.Telemetry, e.JS, pipeline.LeavesSubject(e.Tenant), start, e.apply, nil)
	e.mu.Lock()
	serr := e.syncLocked()
	e.mu.Unlock()
	return errors.Join(err, serr)
}

// apply adds a committed batch: leaves below what is already held are skipped.
func (e *Entries) apply(ev Event) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	next := e.bundles*merkle.TileWidth + uint64(len(e.tail))
	b := ev.Batch
	if b.First > next {
		return fmt.Errorf("entry bundles of %s hold %d leaves but the next committed batch starts at %d", e.Tenant, next, b.First)
	}
	for i, l := range b.Leaves {
		if b.First+uint64(i) < next {
			continue
		}
		if len(e.tail) == 0 {
			e.tailSeq = ev.Seq
		}
		var d []byte
		if l.Data != nil && len(l.Data) <= maxEntry {
			d = append([]byte{}, l.Data...) // the batch's buffer is not kept alive
		}
		e.tail = append(e.tail, tailEntry{data: d})
		if len(e.tail) == merkle.TileWidth {
			if err := e.writeBundle(); err != nil {
				return err
			}
		}
	}
	e.lastSeq = ev.Seq
	// The bundles are a cache of the log of record: syncing every 64 bundles or once a
	// second bounds what a restart re-reads, without an fsync per batch.
	if e.unsynced >= syncBundles || (e.unsynced > 0 && time.Since(e.lastSync) >= time.Second) {
		if err := e.syncLocked(); err != nil {
			return err
		}
	}
	if e.OnBatch != nil {
		e.OnBatch(ev.Seq)
	}
	return nil
}

// encodeBundle writes entries in the C2SP form; it returns the flags of the bundle.
func encodeBundle(dst []byte, entries []tailEntry) ([]byte, uint32) {
	var flags uint32
	for i, t := range entries {
		if t.data == nil && flags == 0 {
			flags = flagHashOnly | uint32(i)<<8
		}
		dst = AppendBundleEntry(dst, t.data)
	}
	return dst, flags
}

// AppendBundleEntry appends data to a C2SP entry bundle body: its big-endian uint16
// length, then data (at most 65,535 bytes; the caller checks).
func AppendBundleEntry(dst, data []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(data)))
	return append(dst, data...)
}

func (e *Entries) writeBundle() error {
	body, flags := encodeBundle(nil, e.tail)
	if _, err := e.data.WriteAt(body, e.dataEnd); err != nil {
		return fmt.Errorf("entry bundles: %w", err)
	}
	var rec [idxRecord]byte
	binary.BigEndian.PutUint64(rec[0:8], uint64(e.dataEnd))
	binary.BigEndian.PutUint32(rec[8:12], uint32(len(body)))
	binary.BigEndian.PutUint32(rec[12:16], flags)
	if _, err := e.idx.WriteAt(rec[:], int64(e.bundles)*idxRecord); err != nil {
		return fmt.Errorf("entry bundles: %w", err)
	}
	e.dataEnd += int64(len(body))
	e.bundles++
	e.tail = e.tail[:0]
	e.unsynced++
	return nil
}

// syncLocked makes the written bundles durable, then records the position.
func (e *Entries) syncLocked() error {
	if e.data == nil || e.lastSeq == 0 {
		return nil
	}
	if err := e.data.Sync(); err != nil {
		return err
	}
	if err := e.idx.Sync(); err != nil {
		return err
	}
	e.unsynced = 0
	e.lastSync = time.Now()
	resume := e.lastSeq + 1
	if len(e.tail) > 0 {
		resume = e.tailSeq
	}
	return saveState(filepath.Join(e.Dir, "state.json"), entriesState{Bundles: e.bundles, ResumeSeq: resume})
}

// Bundle returns the body of entry bundle index holding width entries (1..256): a
// full bundle from disk, a partial one from disk (the prefix of a full bundle) or from
// the leaves of the incomplete last bundle. A bundle the log does not hold yet, or
// one with a leaf appended by hash only, is an error wrapping ErrNoEntry (and so
// fs.ErrNotExist) that says which.
func (e *Entries) Bundle(index uint64, width int) ([]byte, error) {
	if width < 1 || width > merkle.TileWidth {
		return nil, fmt.Errorf("%w: width %d outside 1..%d", ErrNoEntry, width, merkle.TileWidth)
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.data == nil {
		return nil, errors.New("entry bundles are closed")
	}
	switch {
	case index < e.bundles:
		off, length, flags, err := e.record(index)
		if err != nil {
			return nil, err
		}
		if err := hashOnly(index, flags, width); err != nil {
			return nil, err
		}
		body := make([]byte, length)
		if _, err := e.data.ReadAt(body, off); err != nil && !(errors.Is(err, io.EOF) && len(body) == 0) {
			return nil, fmt.Errorf("entry bundle %d: %w", index, err)
		}
		if width < merkle.TileWidth {
			body = BundlePrefix(body, width)
		}
		return body, nil
	case index == e.bundles && width <= len(e.tail):
		body, flags := encodeBundle(nil, e.tail[:width])
		if err := hashOnly(index, flags, width); err != nil {
			return nil, err
		}
		return body, nil
	}
	held := e.bundles*merkle.TileWidth + uint64(len(e.tail))
	return nil, fmt.Errorf("%w: entries %d..%d are not all held yet (%d leaves so far)", ErrNoEntry,
		index*merkle.TileWidth, index*merkle.TileWidth+uint64(width)-1, held)
}

func hashOnly(index uint64, flags uint32, width int) error {
	if flags&flagHashOnly == 0 {
		return nil
	}
	pos := int(flags>>8) & 0xff
	if pos >= width {
		return nil // the hash-only leaf lies beyond this partial bundle
	}
	return NoEntryError(index*merkle.TileWidth + uint64(pos))
}

// NoEntryError says leaf has no entry in C2SP form (404, wrapping ErrNoEntry).
func NoEntryError(leaf uint64) error {
	return fmt.Errorf("%w: leaf %d has no entry in C2SP form (it was appended by its hash only, or is longer than 65,535 bytes); its leaf hash is in the level-0 tile %d", ErrNoEntry, leaf, leaf/merkle.TileWidth)
}

// BundlePrefix cuts a well-formed bundle body after n entries.
func BundlePrefix(body []byte, n int) []byte {
	off := 0
	for i := 0; i < n && off+2 <= len(body); i++ {
		off += 2 + int(binary.BigEndian.Uint16(body[off:]))
	}
	return body[:min(off, len(body))]
}

// Held is how many leaves the bundles hold (full bundles and the tail).
func (e *Entries) Held() uint64 {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.bundles*merkle.TileWidth + uint64(len(e.tail))
}
