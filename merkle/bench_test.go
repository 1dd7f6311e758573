package merkle

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// benchSize is the tree size of the proof benchmarks: a million leaves, not
// a power of two, so the right edge is imperfect.
const benchSize = 1_000_000

// benchTrees are the benchSize trees of the proof benchmarks, built once.
var benchTrees struct {
	once    sync.Once
	dir     string
	mem     *Tree
	file    *Tree
	fileErr error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if benchTrees.dir != "" {
		os.RemoveAll(benchTrees.dir)
	}
	os.Exit(code)
}

// seqLeaf is a distinct leaf hash per index without the cost of hashing.
func seqLeaf(i uint64) Hash {
	var h Hash
	binary.BigEndian.PutUint64(h[:], i)
	h[31] = 1
	return h
}

func benchTree(b *testing.B, kind string) *Tree {
	b.Helper()
	benchTrees.once.Do(func() {
		mem, _ := NewTree(NewMemoryStore())
		dir, err := os.MkdirTemp("", "merkle-bench-")
		if err != nil {
			benchTrees.fileErr = err
			return
		}
		benchTrees.dir = dir
		fs, err := OpenFileStore(dir)
		if err != nil {
			benchTrees.fileErr = err
			return
		}
		file, _ := NewTree(fs)
		for i := range uint64(benchSize) {
			h := seqLeaf(i)
			mem.Append(h)
			if _, err := file.Append(h); err != nil {
				benchTrees.fileErr = err
				return
			}
		}
		benchTrees.fileErr = fs.Sync()
		benchTrees.mem, benchTrees.file = mem, file
	})
	if benchTrees.fileErr != nil {
		b.Fatal(benchTrees.fileErr)
	}
	if kind == "memory" {
		return benchTrees.mem
	}
	return benchTrees.file
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkAppend appends b.N leaves to a new tree and reports the heap
// growth per leaf (heap-B/leaf), which for the file store is only its
// fixed-size write buffers. Tree.Append does not sync; the time of the one
// final Store.Sync (the fsync of every level file) is reported apart as
// sync-ns/leaf.
func BenchmarkAppend(b *testing.B) {
	for _, sk := range storeKinds {
		b.Run(sk.name, func(b *testing.B) {
			store := sk.open(b)
			tr, err := NewTree(store)
			if err != nil {
				b.Fatal(err)
			}
			before := heapInUse()
			b.ResetTimer()
			for i := range uint64(b.N) {
				if _, err := tr.Append(seqLeaf(i)); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			start := time.Now()
			if err := store.Sync(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N), "sync-ns/leaf")
			after := heapInUse()
			b.ReportMetric(float64(int64(after)-int64(before))/float64(b.N), "heap-B/leaf")
			runtime.KeepAlive(tr)
		})
	}
}

// BenchmarkTreeMemory builds a tree of a million leaves per iteration and
// reports the heap it keeps per leaf: about 64 bytes in memory, and nothing
// that grows with the tree for the file store.
func BenchmarkTreeMemory(b *testing.B) {
	for _, sk := range storeKinds {
		b.Run(sk.name+"/1M", func(b *testing.B) {
			var perLeaf float64
			for range b.N {
				b.StopTimer()
				store := sk.open(b)
				before := heapInUse()
				b.StartTimer()
				tr, _ := NewTree(store)
				for i := range uint64(benchSize) {
					if _, err := tr.Append(seqLeaf(i)); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				after := heapInUse()
				perLeaf = float64(int64(after)-int64(before)) / benchSize
				runtime.KeepAlive(tr)
				store.Close()
				b.StartTimer()
			}
			b.ReportMetric(perLeaf, "heap-B/leaf")
		})
	}
}

func BenchmarkInclusionProof(b *testing.B) {
	for _, kind := range []string{"memory", "file"} {
		b.Run(kind+"/1M", func(b *testing.B) {
			tr := benchTree(b, kind)
			r := rand.New(rand.NewPCG(1, 2))
			b.ResetTimer()
			for range b.N {
				if _, err := tr.InclusionProof(r.Uint64N(benchSize), benchSize); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkConsistencyProof(b *testing.B) {
	for _, kind := range []string{"memory", "file"} {
		b.Run(kind+"/1M", func(b *testing.B) {
			tr := benchTree(b, kind)
			r := rand.New(rand.NewPCG(3, 4))
			b.ResetTimer()
			for range b.N {
				if _, err := tr.ConsistencyProof(1+r.Uint64N(benchSize-1), benchSize); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkRootAt(b *testing.B) {
	tr := benchTree(b, "file")
	r := rand.New(rand.NewPCG(5, 6))
	b.ResetTimer()
	for range b.N {
		if _, err := tr.RootAt(1 + r.Uint64N(benchSize-1)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyInclusion(b *testing.B) {
	tr := benchTree(b, "memory")
	p, _ := tr.InclusionProof(123456, benchSize)
	leaf, _ := tr.LeafHash(123456)
	root := tr.Root()
	b.ResetTimer()
	for range b.N {
		if err := VerifyInclusion(123456, benchSize, leaf, p, root); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyConsistency(b *testing.B) {
	tr := benchTree(b, "memory")
	p, _ := tr.ConsistencyProof(654321, benchSize)
	oldRoot, _ := tr.RootAt(654321)
	root := tr.Root()
	b.ResetTimer()
	for range b.N {
		if err := VerifyConsistency(654321, benchSize, oldRoot, root, p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLogFileAppend measures durable appends: one write and one fsync
// per call, for one leaf or a batch of 100.
func BenchmarkLogFileAppend(b *testing.B) {
	leaf := `{"payload":"eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEifQ==","payloadType":"application/vnd.in-toto+json","signatures":[{"keyid":"0123456789abcdef","sig":"c2lnbmF0dXJl"}]}`
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			l, err := OpenLogFile(filepath.Join(b.TempDir(), "log.jsonl"), LogFileOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			entries := make([]Entry, batch)
			b.ResetTimer()
			for i := range b.N {
				for j := range entries {
					entries[j] = Entry{Kind: LineLeaf, Leaf: fmt.Sprint(leaf, i, j)}
				}
				if _, err := l.AppendBatch(entries); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/leaf")
		})
	}
}

// writeLogFile writes entries to a new log file and returns its path and root.
func writeLogFile(b *testing.B, entries []Entry) (string, Hash) {
	path := filepath.Join(b.TempDir(), "log.jsonl")
	l, err := OpenLogFile(path, LogFileOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	if _, err := l.AppendBatch(entries); err != nil {
		b.Fatal(err)
	}
	return path, l.Tree().Root()
}

// BenchmarkOpenLogFile reopens a log file of 100,000 hash lines, rebuilding
// the tree in a memory store, and reports the heap kept per leaf (tree,
// line offsets and the IndexOf map).
func BenchmarkOpenLogFile(b *testing.B) {
	const n = 100_000
	entries := make([]Entry, n)
	for i := range entries {
		entries[i] = Entry{Kind: LineHash, Hash: seqLeaf(uint64(i))}
	}
	path, want := writeLogFile(b, entries)
	entries = nil
	var perLeaf float64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		before := heapInUse()
		b.StartTimer()
		l, err := OpenLogFile(path, LogFileOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		perLeaf = float64(int64(heapInUse())-int64(before)) / n
		if l.Tree().Root() != want {
			b.Fatal("root differs")
		}
		l.Close()
		b.StartTimer()
	}
	b.ReportMetric(perLeaf, "heap-B/leaf")
}

// envelopeLeaf is a leaf shaped like a receipt's DSSE envelope (5 KB of JSON), the
// i-th of a log: a gateway's log file holds one per call.
func envelopeLeaf(i int) string {
	return `{"payload":"` + strings.Repeat("eyJfdHlwZSI6Imh0dHBz", 240) + fmt.Sprintf("%08d", i) + `","payloadType":"application/vnd.in-toto+json","signatures":[{"keyid":"` + strings.Repeat("ab", 32) + `","sig":"` + strings.Repeat("Zm9v", 22) + `"}]}`
}

// BenchmarkOpenLogFileOfReceipts reopens a log file of 30,000 envelope leaves, as a
// gateway does at every start.
//
//	go test -run '^$' -bench OpenLogFileOfReceipts -benchtime 3x ./merkle/
func BenchmarkOpenLogFileOfReceipts(b *testing.B) {
	entries := make([]Entry, 30_000)
	for i := range entries {
		entries[i] = Entry{Kind: LineLeaf, Leaf: envelopeLeaf(i)}
	}
	path, want := writeLogFile(b, entries)
	for b.Loop() {
		l, err := OpenLogFile(path, LogFileOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if l.Tree().Root() != want {
			b.Fatal("root differs")
		}
		l.Close()
	}
}

// BenchmarkLeafLine parses and writes the line of a leaf that is itself JSON (a
// receipt's envelope, 5 KB, quotes escaped in the line), the kind a gateway's log file
// holds one of per call: parse (ParseLine, at every open), parse-json (the same
// through encoding/json, as before), write (appendLine), write-json (encoding/json's
// string encoding, which appendLine used before, without the leaf hash).
//
//	go test -run '^$' -bench LeafLine ./merkle/
func BenchmarkLeafLine(b *testing.B) {
	leaf := envelopeLeaf(0)
	line, _, err := appendLine(nil, Entry{Kind: LineLeaf, Leaf: leaf})
	if err != nil {
		b.Fatal(err)
	}
	line = line[:len(line)-1]
	b.Run("parse", func(b *testing.B) {
		b.SetBytes(int64(len(line)))
		for b.Loop() {
			if e, err := ParseLine(line); err != nil || e.Leaf != leaf {
				b.Fatal(err)
			}
		}
	})
	b.Run("parse-json", func(b *testing.B) {
		b.SetBytes(int64(len(line)))
		for b.Loop() {
			if e, err := parseLineSlow(line); err != nil || e.Leaf != leaf {
				b.Fatal(err)
			}
		}
	})
	b.Run("write", func(b *testing.B) {
		b.SetBytes(int64(len(line)))
		var dst []byte
		for b.Loop() {
			if dst, _, err = appendLine(dst[:0], Entry{Kind: LineLeaf, Leaf: leaf}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("write-json", func(b *testing.B) {
		b.SetBytes(int64(len(line)))
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(leaf); err != nil {
				b.Fatal(err)
			}
		}
	})
}
