package vectorgen

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// CorpusOptions shape a generated corpus: a fleet's receipts for an audit.
type CorpusOptions struct {
	// Receipts is how many receipt files to write (good and tampered); required.
	Receipts int
	// HeadEvery is how many leaves the hosted log takes between two signed heads
	// (default 64): receipts share heads as they do behind a log that signs in batches.
	HeadEvery int
	// Copies is how many tampered receipts of each cause to plant (default 3).
	Copies int
}

// Corpus is what WriteCorpus wrote, with the verdicts a verifier must reach.
type Corpus struct {
	Dir        string
	Bundles    string            // the directory of the receipt files: Dir/receipts
	Receipts   int               // receipt files written
	Keys       map[string]string // key name → .pub file: gateway, gateway-2, sdk, alice, log, witness
	LogFile    string            // a copy of the hosted log
	LogID      string            // the log id every head names
	Checkpoint string            // the log's last head as a checkpoint file, countersigned by the witness
	// Tampered maps each planted receipt's path to the first check that must fail.
	Tampered map[string]string
	// Forked lists receipts that verify alone but sit in a fork of the log: checked
	// against Checkpoint, they fail conformance.CheckWitnessCovers.
	Forked []string
	// Causes maps each tampered path to its cause.
	Causes map[string]string
}

// The receipts of a corpus: two gateways and an SDK appending to one hosted log,
// agents under three grants (one of them chained), a twentieth of the gateway calls
// pre-committed.
const (
	corpusLogID = "acme-fleet"
	corpusStep  = 20 * time.Second // at most; all receipts fall in 25 days of the grants' 30
)

// WriteCorpus writes a corpus of opts.Receipts receipt bundles into dir (created),
// under receipts/<issuer>/, with their authorization files, the log copy, key files
// and a witnessed checkpoint; two runs write the same bytes.
func WriteCorpus(dir string, opts CorpusOptions) (*Corpus, error) {
	if opts.Receipts <= 0 {
		return nil, fmt.Errorf("corpus: Receipts must be positive, got %d", opts.Receipts)
	}
	if opts.HeadEvery <= 0 {
		opts.HeadEvery = 64
	}
	if opts.Copies <= 0 {
		opts.Copies = 3
	}
	g := &corpusGen{dir: dir, opts: opts, keys: map[string]*signer.Key{}, out: &Corpus{Dir: dir, Bundles: filepath.Join(dir, "receipts"), Keys: map[string]string{}, Tampered: map[string]string{}, Causes: map[string]string{}, LogID: corpusLogID}}
	for _, sub := range []string{"keys", "receipts/gateway", "receipts/gateway-2", "receipts/sdk"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, err
		}
	}
	for _, name := range []string{"gateway", "gateway-2", "sdk", "alice", "agent-a", "log", "witness", "rogue", "mallory"} {
		k := vectorKey(name)
		g.keys[name] = k
		p := filepath.Join(dir, "keys", name+".pub")
		if err := os.WriteFile(p, []byte(k.Public().PEM()), 0o644); err != nil {
			return nil, err
		}
		g.out.Keys[name] = p
	}
	g.step = min(corpusStep, 25*24*time.Hour/time.Duration(opts.Receipts))
	var err error
	if g.tree, err = merkle.NewTree(merkle.NewMemoryStore()); err != nil {
		return nil, err
	}
	g.out.LogFile = filepath.Join(dir, "log.jsonl")
	lf, err := os.Create(g.out.LogFile)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	g.logw = bufio.NewWriterSize(lf, 1<<20)
	g.grants()
	if err := g.run(); err != nil {
		return nil, err
	}
	if err := g.logw.Flush(); err != nil {
		return nil, err
	}
	if err := lf.Close(); err != nil {
		return nil, err
	}
	return g.out, g.checkpoint()
}

type corpusGen struct {
	dir  string
	opts CorpusOptions
	keys map[string]*signer.Key
	out  *Corpus

	tree    *merkle.Tree
	logw    *bufio.Writer
	pending []pendingLeaf
	ready   []*corpusCall // pre-committed calls whose authorization has a head
	tick    int
	step    time.Duration

	grantA, grantB, grantC, greedy, stranger *receipt.Envelope
	lastAuth                                 *receipt.Authorization
}

type pendingLeaf struct {
	index uint64
	done  func(receipt.Inclusion, *receipt.Envelope) error
}

func (g *corpusGen) now() time.Time {
	g.tick++
	return vectorEpoch.Add(time.Duration(g.tick) * g.step)
}

func (g *corpusGen) grants() {
	sign := func(signerName, agent string, scopes []string, agentKey string, parent *receipt.Envelope) *receipt.Envelope {
		var ak *signer.PublicKey
		if agentKey != "" {
			p := g.keys[agentKey].Public()
			ak = &p
		}
		env, err := receipt.SignJSON(receipt.PayloadDelegation, receipt.NewGrant("alice", agent, scopes, grantIssuedAt, grantTTL, ak, parent), g.keys[signerName])
		if err != nil {
			panic(err)
		}
		return env
	}
	g.grantA = sign("alice", "agent-a", []string{"search", "transfer", "deploy"}, "agent-a", nil)
	g.grantB = sign("alice", "agent-b", []string{"search", "lookup"}, "", nil)
	g.grantC = sign("agent-a", "agent-c", []string{"search"}, "", g.grantA)
	g.greedy = sign("agent-a", "agent-x", []string{"search", "delete_repo"}, "", g.grantA)
	g.stranger = sign("mallory", "agent-a", []string{"search", "transfer", "deploy"}, "", nil)
}

// add appends a leaf to the hosted log; done gets its proof once a head covers it.
func (g *corpusGen) add(leaf []byte, done func(receipt.Inclusion, *receipt.Envelope) error) error {
	idx, err := g.tree.Append(merkle.LeafHash(leaf))
	if err != nil {
		return err
	}
	line, _ := json.Marshal(string(leaf))
	g.logw.Write(line)
	g.logw.WriteByte('\n')
	g.pending = append(g.pending, pendingLeaf{idx, done})
	if len(g.pending) >= g.opts.HeadEvery {
		return g.seal()
	}
	return nil
}

// seal signs a head over every leaf so far and hands each pending leaf its proof.
func (g *corpusGen) seal() error {
	if len(g.pending) == 0 {
		return nil
	}
	size := g.tree.Size()
	head, err := receipt.SignTreeHead(g.keys["log"], size, g.tree.Root().String(), g.now(), corpusLogID)
	if err != nil {
		return err
	}
	pend := g.pending
	g.pending = nil
	for _, p := range pend {
		hs, err := g.tree.InclusionProof(p.index, size)
		if err != nil {
			return err
		}
		if err := p.done(receipt.Inclusion{LeafIndex: p.index, TreeSize: size, Hashes: receipt.HashStrings(hs)}, head); err != nil {
			return err
		}
	}
	return nil
}

func (g *corpusGen) checkpoint() error {
	size := g.tree.Size()
	head, err := receipt.SignTreeHead(g.keys["log"], size, g.tree.Root().String(), g.now(), corpusLogID)
	if err != nil {
		return err
	}
	head.AddSignature(g.keys["witness"])
	th, err := receipt.DecodeTreeHead(head)
	if err != nil {
		return err
	}
	cp := client.CheckpointFile{Tenant: "default", LogID: corpusLogID, TreeSize: size, RootHash: th.RootHash, SignedAt: th.Timestamp, Envelope: head}
	data, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return err
	}
	g.out.Checkpoint = filepath.Join(g.dir, "checkpoint.json")
	return os.WriteFile(g.out.Checkpoint, append(data, '\n'), 0o644)
}

func (g *corpusGen) writeBundle(path string, b *receipt.Bundle) error {
	data, err := marshalBundle(b)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
