package receipt

import (
	"context"
	"fmt"
	"strings"
	"time"

	"svc.dev/svc/merkle"
	"svc.dev/svc/signer"
)

// SignTreeHead signs a tree head payload with key.
func SignTreeHead(key *signer.Key, size uint64, rootHash string, at time.Time, logID string) (*Envelope, error) {
	payload, err := treeHeadPayload(TreeHead{TreeSize: size, RootHash: rootHash, Timestamp: FormatTime(at), Log: logID})
	if err != nil {
		return nil, err
	}
	return Sign(PayloadTreeHead, payload, key), nil
}

// treeHeadPayload is Canonical(th), written directly (members sorted: log, rootHash,
// timestamp, treeSize): a local log signs one head per commit.
func treeHeadPayload(th TreeHead) ([]byte, error) {
	w := jcsWriter{b: make([]byte, 0, 160)}
	o := w.object()
	if th.Log != "" {
		o.key("log").str(th.Log)
	}
	o.key("rootHash").str(th.RootHash)
	o.key("timestamp").str(th.Timestamp)
	o.key("treeSize").uint(th.TreeSize)
	o.end()
	if w.bad || w.err != nil {
		return Canonical(th) // encoding/json's way with invalid UTF-8
	}
	return w.b, nil
}

// DecodeTreeHead reads the payload of a tree head envelope, checking its type and form.
func DecodeTreeHead(env *Envelope) (*TreeHead, error) {
	var th TreeHead
	if err := env.DecodePayload(PayloadTreeHead, &th); err != nil {
		return nil, fmt.Errorf("tree head: %w", err)
	}
	if !IsDigestHex(th.RootHash) {
		return nil, fmt.Errorf("tree head: rootHash %q is not 64 lowercase hex characters", th.RootHash)
	}
	if _, err := ParseTime(th.Timestamp); err != nil {
		return nil, fmt.Errorf("tree head: timestamp: %w", err)
	}
	return &th, nil
}

// EnvelopeSigner signs DSSE payloads. The log signs its tree heads through one: a
// KeySigner in file mode, where the key is in-process, or the signer service's client
// in database mode, where the log server never holds the key.
//
// SignEnvelope returns an envelope with exactly one signature, by the key KeyID names.
// Errors from a signer that could not be reached wrap ErrLogUnavailable.
type EnvelopeSigner interface {
	KeyID() string
	SignEnvelope(ctx context.Context, payloadType string, payload []byte) (*Envelope, error)
}

// KeySigner is an EnvelopeSigner holding its key in-process.
type KeySigner struct{ Key *signer.Key }

// KeyID is the key's id.
func (s KeySigner) KeyID() string { return s.Key.KeyID() }

// SignEnvelope signs with the in-process key.
func (s KeySigner) SignEnvelope(_ context.Context, payloadType string, payload []byte) (*Envelope, error) {
	return Sign(payloadType, payload, s.Key), nil
}

// SignTreeHeadWith signs a tree head through s.
func SignTreeHeadWith(ctx context.Context, s EnvelopeSigner, size uint64, rootHash string, at time.Time, logID string) (*Envelope, error) {
	payload, err := treeHeadPayload(TreeHead{TreeSize: size, RootHash: rootHash, Timestamp: FormatTime(at), Log: logID})
	if err != nil {
		return nil, err
	}
	return s.SignEnvelope(ctx, PayloadTreeHead, payload)
}

// HeadTree is the growing tree whose heads a log signs (a *merkle.Tree): the size and
// root to sign, and the consistency proofs a signer that refuses forks asks for.
type HeadTree interface {
	Size() uint64
	RootAt(size uint64) (merkle.Hash, error)
	ConsistencyProof(oldSize, newSize uint64) ([]merkle.Hash, error)
}

// HeadSigner is an EnvelopeSigner that signs a tree head only when it extends the last
// head it signed for the same log (the signer service's client): it reads the head to
// sign from tree itself, so that it can prove consistency with what it signed before
// and never asks for a head older than one it has seen signed. tenant names the log
// to the signer when logID is empty.
type HeadSigner interface {
	EnvelopeSigner
	SignHeadOf(ctx context.Context, tree HeadTree, tenant, logID string, at time.Time) (*Envelope, *TreeHead, error)
}

// DefaultLogIDPrefix starts every default log id (DefaultLogID); an operator-set log
// id may not start with it.
const DefaultLogIDPrefix = "svc-log/"

// DefaultLogID is the log id of a tenant's heads when the operator set none:
// "svc-log/<tenant>". It names the log inside the signed head, so a head cannot be
// passed off as another tenant's log, and the signer service keeps its append-only
// state under it. It does not name the key, so it outlives key rotations (the
// signer's state, kept per log, carries across them); the signature names the key.
func DefaultLogID(tenant string) string { return DefaultLogIDPrefix + tenant }

// ParseDefaultLogID is the tenant of a log id of DefaultLogID's form; ok is false for
// any other log id.
func ParseDefaultLogID(id string) (tenant string, ok bool) {
	tenant, found := strings.CutPrefix(id, DefaultLogIDPrefix)
	if !found || tenant == "" || strings.Contains(tenant, "/") {
		return "", false
	}
	return tenant, true
}

// SignHead signs the head of tree as it now stands through s and returns the envelope
// with the head it carries. A HeadSigner reads the tree itself (it may sign a larger
// head than the tree had when SignHead was called, never a smaller one); any other
// signer signs the tree's current size and root.
func SignHead(ctx context.Context, s EnvelopeSigner, tree HeadTree, tenant, logID string, at time.Time) (*Envelope, *TreeHead, error) {
	if hs, ok := s.(HeadSigner); ok {
		return hs.SignHeadOf(ctx, tree, tenant, logID, at)
	}
	size := tree.Size()
	root, err := tree.RootAt(size)
	if err != nil {
		return nil, nil, err
	}
	env, err := SignTreeHeadWith(ctx, s, size, root.String(), at, logID)
	if err != nil {
		return nil, nil, err
	}
	return env, &TreeHead{TreeSize: size, RootHash: root.String(), Timestamp: FormatTime(at), Log: logID}, nil
}

// TreeHeadPayload is the canonical JSON of th, the payload a tree head envelope carries.
func TreeHeadPayload(th TreeHead) ([]byte, error) { return treeHeadPayload(th) }
