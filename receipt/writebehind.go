package receipt

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// ErrIssuerClosed is returned by an issuer used after Close.
var ErrIssuerClosed = errors.New("issuer: closed")

// bundleWriter writes bundle files behind the calls that issued them.
//
// It is used only with a FileLog, whose log file holds every envelope in full: once
// FileLog.Append has returned, the receipt is durable (its envelope is a line of the
// fsynced log file), and the bundle file is a projection of the log that a crash may
// lose and the next start rebuilds (see recoverBundles). Writing it here, with no
// fsync, takes every file-system metadata operation off the call's path: on ext4 the
// first create or rename after the log's fsync waits for the journal, 0.3 to 1 ms.
//
// The mark: every leaf below it has its bundle file on stable storage. The writer
// advances it after a syncfs and stores it in <receiptsDir>/.svc-bundles.mark;
// recovery starts there.
type bundleWriter struct {
	dir    string
	dirFD  *os.File // dir, open for the writer's life: syncfs reports errors since it was opened
	log    *FileLog
	logger *slog.Logger

	active   atomic.Int64 // calls between reserve and enqueue or cancel
	lastDone atomic.Int64 // unix nanoseconds of the last enqueue or cancel
	calls    sync.WaitGroup

	// The writer's alarms, set by the calls themselves so that the writer sleeps
	// until there is something to do (see run): quietAt rings quietAfter after the
	// last call in progress ended, dueAt maxDelay after the first bundle queued since
	// the writer last wrote (unwritten counts those).
	quietAt   *time.Timer
	dueAt     *time.Timer
	unwritten atomic.Int64

	queue    chan queuedBundle
	flushReq chan chan error
	stop     chan struct{}
	done     chan struct{}
	closeErr error // set by run before done closes

	mu       sync.Mutex
	closed   bool
	nextTok  uint64
	inflight map[uint64]uint64 // token → log size when taken: a lower bound of its leaf's index

	// Owned by the writer goroutine.
	mark     uint64
	unsynced []string       // files written since the last sync
	failed   []queuedBundle // writes that failed, retried before each sync
	writeErr error          // the first write error since the last flush
}

type queuedBundle struct {
	tok    uint64
	name   string // file name in dir
	bundle *Bundle
}

// bundleQueue bounds the files waiting to be written; a full queue makes issuing wait.
const bundleQueue = 4096

func newBundleWriter(dir string, log *FileLog, logger *slog.Logger, mark uint64) (*bundleWriter, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("issuer: receipts directory: %w", err)
	}
	w := &bundleWriter{dir: dir, dirFD: d, log: log, logger: logger,
		queue: make(chan queuedBundle, bundleQueue), flushReq: make(chan chan error),
		stop: make(chan struct{}), done: make(chan struct{}), inflight: map[uint64]uint64{}, mark: mark,
		quietAt: time.NewTimer(time.Hour), dueAt: time.NewTimer(time.Hour)}
	go w.run()
	return w, nil
}

// reserve is called before a leaf is appended. The token names the leaf until its file
// is written (done) or the append failed (cancel); the lower bound is the log's size
// now, below which the leaf can only be if it was already in the log.
func (w *bundleWriter) reserve() (tok, lowerBound uint64, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, 0, ErrIssuerClosed
	}
	tok = w.nextTok
	w.nextTok++
	lowerBound = w.log.File().Size() // read under mu: see sync
	w.inflight[tok] = lowerBound
	w.active.Add(1)
	w.calls.Add(1)
	return tok, lowerBound, nil
}

// cancel ends a reservation whose leaf needs no file from the writer: the append
// failed, or the leaf was already in the log (its file was written then).
func (w *bundleWriter) cancel(tok uint64) {
	w.mu.Lock()
	delete(w.inflight, tok)
	w.mu.Unlock()
	w.callDone()
}

// enqueue hands a logged bundle to the writer; it waits while the queue is full.
// Queuing wakes nobody: the first bundle since the writer last wrote sets its dueAt
// alarm, and the end of the call its quietAt alarm.
func (w *bundleWriter) enqueue(tok uint64, name string, b *Bundle) {
	w.queue <- queuedBundle{tok: tok, name: name, bundle: b}
	if w.unwritten.Add(1) == 1 {
		w.dueAt.Reset(maxDelay)
	}
	w.callDone()
}

func (w *bundleWriter) callDone() {
	w.lastDone.Store(time.Now().UnixNano())
	if w.active.Add(-1) == 0 {
		w.quietAt.Reset(quietAfter) // the quiet moment starts, unless a call begins meanwhile
	}
	w.calls.Done()
}

// When the writer writes. A file written while a call's log line is being fsynced
// makes that fsync commit the file's metadata too: with calls back to back, writing
// each file at once nearly doubled a call's time (Finish p50 490 µs without files,
// 750 to 890 µs with them; BenchmarkFinish/write-behind). So the writer waits for a
// quiet moment, no call in progress for quietAfter, which an agent's calls, seconds
// apart, give at once; under sustained load it writes what waited every maxDelay,
// so a few calls pay instead of every one. The writer sleeps until one of the two
// alarms the calls set rings (quietAt, dueAt), a flush or a close asks, or a sync is
// due: a queued bundle does not wake it, nor does a call in progress make it look
// again every quietAfter (with calls back to back it woke three or four times a
// call, each wake a thread woken and put back to sleep). Syncs (syncfs) wait for
// quiet as well, but not longer than maxUnsynced, which bounds the work of a
// recovery.
const (
	quietAfter  = 200 * time.Microsecond
	maxDelay    = 20 * time.Millisecond
	syncEvery   = time.Second
	maxUnsynced = 5 * time.Second
)

func (w *bundleWriter) run() {
	defer close(w.done)
	var (
		pending  []queuedBundle
		lastSync = time.Now()
		dirty    bool // files written since the last sync
	)
	defer w.quietAt.Stop()
	defer w.dueAt.Stop()
	tick := time.NewTicker(syncEvery)
	defer tick.Stop()
	writeAll := func() {
		// A bundle queued from here on sets dueAt again: the drain below may take
		// it, and then the alarm rings for nothing, but none is left without one.
		w.unwritten.Store(0)
		pending = w.drainInto(pending)
		for _, q := range pending {
			w.write(q)
		}
		dirty = dirty || len(pending) > 0
		clear(pending) // no bundle stays reachable from the spare capacity
		pending = pending[:0]
	}
	sync := func() error {
		dirty, lastSync = false, time.Now()
		return w.sync()
	}
	for {
		due := false
		select {
		case <-w.quietAt.C:
		case <-w.dueAt.C:
			due = true
		case <-tick.C:
			if (dirty || len(w.failed) > 0) && (w.quiet() || time.Since(lastSync) >= maxUnsynced) {
				sync()
			}
			continue
		case reply := <-w.flushReq:
			writeAll()
			err := sync()
			reply <- errors.Join(w.writeErr, err)
			w.writeErr = nil
			continue
		case <-w.stop:
			// close waited for every call that had reserved: everything is queued.
			writeAll()
			w.closeErr = errors.Join(w.writeErr, sync(), w.dirFD.Close())
			return
		}
		pending = w.drainInto(pending)
		if len(pending) > 0 && (due || w.quiet() || len(pending) >= bundleQueue) {
			writeAll()
		}
		// Else a call is in progress, or one ended less than quietAfter ago: its end
		// sets (or set) quietAt again, and dueAt rings maxDelay after the first of
		// these bundles was queued.
	}
}

// quiet reports whether no call has been in progress for quietAfter.
func (w *bundleWriter) quiet() bool {
	return w.active.Load() == 0 && time.Since(time.Unix(0, w.lastDone.Load())) >= quietAfter
}

// drainInto appends everything queued so far to pending.
func (w *bundleWriter) drainInto(pending []queuedBundle) []queuedBundle {
	for {
		select {
		case q := <-w.queue:
			pending = append(pending, q)
		default:
			return pending
		}
	}
}

// write writes one bundle file. A failure keeps the token in flight (the mark stays
// below the leaf) and the bundle on the retry list of the next sync.
func (w *bundleWriter) write(q queuedBundle) bool {
	data, err := bundleFile(q.bundle)
	if err == nil {
		err = writeFileNoSyncIn(w.dirFD, w.dir, q.name, data, 0o644)
	}
	if err != nil {
		w.logger.Error("receipt file not written; the receipt is in the log file, the writer retries and the next start rebuilds the file",
			"file", q.name, "leaf", q.bundle.Inclusion.LeafIndex, "err", err)
		w.failed = append(w.failed, q)
		if w.writeErr == nil {
			w.writeErr = err
		}
		return false
	}
	w.unsynced = append(w.unsynced, q.name)
	w.mu.Lock()
	delete(w.inflight, q.tok)
	w.mu.Unlock()
	return true
}

// sync retries failed writes, makes the written files durable and advances the mark.
func (w *bundleWriter) sync() error {
	if failed := w.failed; len(failed) > 0 {
		w.failed = nil
		for _, q := range failed {
			w.write(q) // back on the list if it fails again
		}
	}
	w.mu.Lock()
	// Every leaf below the log's size whose token is no longer in flight has its file
	// written; a token taken after this point gets a leaf at or above this size.
	mark := w.log.File().Size()
	for _, lb := range w.inflight {
		mark = min(mark, lb)
	}
	w.mu.Unlock()
	if len(w.unsynced) == 0 && mark <= w.mark {
		return nil
	}
	if err := syncDir(w.dirFD, w.unsynced); err != nil {
		w.logger.Error("syncing the receipt files failed; the next start checks them against the log", "dir", w.dir, "err", err)
		return err
	}
	w.unsynced = w.unsynced[:0]
	if mark <= w.mark {
		return nil
	}
	if err := writeMark(w.dir, w.log, mark); err != nil {
		w.logger.Error("recording which receipt files are durable failed", "dir", w.dir, "err", err)
		return err
	}
	w.mark = mark
	return nil
}

// flush writes every bundle queued so far and makes them durable. It reports the
// write errors since the last flush.
func (w *bundleWriter) flush() error {
	reply := make(chan error, 1)
	select {
	case w.flushReq <- reply:
		return <-reply
	case <-w.done:
		return ErrIssuerClosed
	}
}

// close refuses new calls, waits for the calls in progress to hand over their
// bundles, writes and syncs everything and stops the writer. Every call of close
// returns after that, with the write and sync errors.
func (w *bundleWriter) close() error {
	w.mu.Lock()
	first := !w.closed
	w.closed = true
	w.mu.Unlock()
	if first {
		w.calls.Wait()
		close(w.stop)
	}
	<-w.done
	return w.closeErr
}

// writeFileNoSync writes path so that a reader sees the whole file or none, without
// fsync: durability comes from the log file. Where the file system can, the file is
// written unnamed and then linked under its name (writeLinked: one directory entry
// made, where a temporary file and a rename make two and remove one); else, and for
// a file that exists already, through a temporary file and a rename.
func writeFileNoSync(path string, data []byte, perm os.FileMode) error {
	if ok, err := writeLinked(cwdFD, filepath.Dir(path), path, data, perm); ok {
		return err
	}
	return writeRenamed(path, data, perm)
}

// writeFileNoSyncIn is writeFileNoSync for the file name in the directory dir, which
// is dirPath, held open: the unnamed file is made and linked relative to it.
func writeFileNoSyncIn(dir *os.File, dirPath, name string, data []byte, perm os.FileMode) error {
	if ok, err := writeLinked(int(dir.Fd()), ".", name, data, perm); ok {
		return err
	}
	return writeRenamed(filepath.Join(dirPath, name), data, perm)
}

// writeRenamed writes path through a temporary file and a rename, without fsync.
func writeRenamed(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}
