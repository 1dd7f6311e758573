package remote

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/note"

	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// C2SP checkpoints through the signer.
//
// Besides tree heads the signer signs one other thing: a C2SP tlog-checkpoint
// (https://c2sp.org/tlog-checkpoint). The log posts to /sign payloadType
// PayloadCheckpointNote and, as payload, the checkpoint text, exactly three lines
//
//	<origin>
//	<tree size, decimal>
//	<root hash, standard base64>
//
// and the signer answers, as for a tree head, the signed Envelope (SPEC.md, "Signer
// process"): payloadType PayloadCheckpointNote, and as payload the checkpoint as C2SP
// publishes it, a signed note, the text followed by a blank line and the log key's
// note signature line
//
//	— <origin> base64(key hash ‖ Ed25519 signature over the text)
//
// whose key name is the origin. The Envelope's own signature is DSSE's, over the
// pre-authentication encoding of that payload, so any DSSE verifier holding the log
// key verifies the Envelope, and any C2SP client holding the origin's verifier key
// verifies the note it carries. The note signature cannot be the Envelope's signature:
// a note verifier checks Ed25519 over the text itself, a DSSE verifier over
// "DSSEv1 <len> <type> <len> <payload>", and no text is both (a checkpoint's first line
// is its origin, which may not start with "DSSEv1", so the two messages the key signs
// never coincide). The client (NoteSigner) checks both signatures and that the note's
// text is the one it sent, then publishes the payload.
//
// Checkpoints are append-only as tree heads are, in a chain of their own per origin
// (state key "c2sp-checkpoint:<origin>"): a larger checkpoint needs a consistency
// proof from the last one signed for its origin, the same size the same root, and a
// smaller one is refused (409 with the last one), so no stolen token makes the signer
// show a witness two histories of one origin. The chain of a tenant's default origin,
// receipt.DefaultLogID ("svc-log/<tenant>"), carries on from the one its checkpoints
// had before the origin stopped naming the key ("svc-log/<16 hex of a keyid of this
// signer>/<tenant>"), as a head's log carries on from "tenant:<tenant>".

// PayloadCheckpointNote is the payloadType of a C2SP checkpoint sent to /sign (the
// text) and of the Envelope it answers (the signed note).
const PayloadCheckpointNote = "application/vnd.svc.c2sp-checkpoint"

// checkpointKeyPrefix starts the state key of an origin's checkpoint chain.
const checkpointKeyPrefix = "c2sp-checkpoint:"

// maxOrigin caps a checkpoint's origin line.
const maxOrigin = 1024

// ParseCheckpointText checks a C2SP checkpoint text as the signer takes it and
// returns its origin, size and root. The error names what was wrong.
func ParseCheckpointText(text []byte) (origin string, size uint64, root merkle.Hash, err error) {
	lines := strings.Split(string(text), "\n")
	if len(lines) != 4 || lines[3] != "" {
		return "", 0, root, errors.New("checkpoint text must be exactly three lines (origin, size, root), each ending in a newline, without extension lines")
	}
	origin = lines[0]
	switch {
	case origin == "" || len(origin) > maxOrigin:
		return "", 0, root, fmt.Errorf("checkpoint origin must be 1 to %d bytes", maxOrigin)
	case !utf8.ValidString(origin) || strings.ContainsFunc(origin, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return "", 0, root, errors.New("checkpoint origin must be UTF-8 without control characters")
	case strings.HasPrefix(origin, "DSSEv1"):
		return "", 0, root, errors.New("checkpoint origin may not start with DSSEv1")
	case strings.ContainsFunc(origin, unicode.IsSpace) || strings.Contains(origin, "+"):
		return "", 0, root, errors.New("checkpoint origin may contain neither spaces nor '+' (it is the note key name of the log's signature)")
	}
	size, err = strconv.ParseUint(lines[1], 10, 64)
	if err != nil || strconv.FormatUint(size, 10) != lines[1] {
		return "", 0, root, fmt.Errorf("checkpoint size %q is not a decimal number without leading zeros", lines[1])
	}
	b, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(b) != len(root) || base64.StdEncoding.EncodeToString(b) != lines[2] {
		return "", 0, root, fmt.Errorf("checkpoint root %q is not the standard base64 of 32 bytes", lines[2])
	}
	copy(root[:], b)
	return origin, size, root, nil
}

// checkpointHead is the head of a checkpoint text in the signer's append-only check:
// its Log is the state key of the origin's chain.
func checkpointHead(text []byte) (*receipt.TreeHead, error) {
	origin, size, root, err := ParseCheckpointText(text)
	if err != nil {
		return nil, fmt.Errorf("payload is not a C2SP checkpoint: %w", err)
	}
	return &receipt.TreeHead{Log: checkpointKeyPrefix + origin, TreeSize: size, RootHash: root.String()}, nil
}

// NoteSigner signs the C2SP checkpoints of one origin through the signer: the
// remote counterpart of an in-process note signer.
type NoteSigner struct {
	c        *Client
	origin   string
	tenant   string
	tree     receipt.HeadTree
	verifier note.Verifier
	vkey     string
}

// NewNoteSigner makes the note signer of origin, whose consistency proofs come from
// tree (the tenant's).
func (c *Client) NewNoteSigner(origin, tenant string, tree receipt.HeadTree) (*NoteSigner, error) {
	vkey, err := note.NewEd25519VerifierKey(origin, c.key.Key)
	if err != nil {
		return nil, err
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, err
	}
	return &NoteSigner{c: c, origin: origin, tenant: tenant, tree: tree, verifier: v, vkey: vkey}, nil
}

// VerifierKey is the note verifier key of the origin (what witnesses and clients
// are configured with).
func (n *NoteSigner) VerifierKey() string { return n.vkey }

// SignCheckpoint signs the checkpoint of the tree at size, whose root is root, and
// returns the signed note. The signer's 409 (another process signed a checkpoint of
// this origin) is answered with a proof from the one it names; a checkpoint smaller
// than that one is not signed (wraps ErrConflict).
func (n *NoteSigner) SignCheckpoint(ctx context.Context, size uint64, root merkle.Hash) ([]byte, error) {
	text := fmt.Sprintf("%s\n%d\n%s\n", n.origin, size, base64.StdEncoding.EncodeToString(root[:]))
	key := checkpointKeyPrefix + n.origin
	unlock := n.c.heads.lock(key)
	defer unlock()
	var lastErr error
	for range 3 {
		req := &SignRequest{PayloadType: PayloadCheckpointNote, Payload: []byte(text), Tenant: n.tenant}
		if last, ok := n.c.heads.get(key); ok && last.TreeSize < size {
			proof, err := n.tree.ConsistencyProof(last.TreeSize, size)
			if err != nil {
				return nil, fmt.Errorf("consistency proof from checkpoint %d to %d: %w", last.TreeSize, size, err)
			}
			req.Consistency = &Consistency{FromSize: last.TreeSize, Proof: make([]string, len(proof))}
			for i, h := range proof {
				req.Consistency.Proof[i] = h.String()
			}
		}
		body, err := n.c.post(ctx, req)
		if err == nil {
			var signed []byte
			if signed, err = OpenCheckpointAnswer(body, n.c.key, text, n.verifier); err != nil {
				return nil, fmt.Errorf("%w: %s/sign: %w", ErrBadResponse, n.c.base, err)
			}
			n.c.heads.set(SignedHead{Log: key, TreeSize: size, RootHash: root.String()})
			return signed, nil
		}
		var conflict *conflictError
		if !errors.As(err, &conflict) {
			return nil, err
		}
		lastErr = err
		last := conflict.Last
		if last.Log != key || last.TreeSize >= size {
			return nil, err // a fork, a rollback, or a proof the signer would not take
		}
		n.c.heads.set(last)
	}
	return nil, lastErr
}

// OpenCheckpointAnswer checks the signer's answer to a checkpoint text and returns the
// signed note it carries: body must be a signed Envelope of payloadType
// PayloadCheckpointNote with exactly one signature, by key, that verifies (DSSE), whose
// payload is text followed by exactly one note signature line, by v (the origin's
// verifier key of key), that verifies, in the encoding note.Sign gives. The error says
// which check failed.
func OpenCheckpointAnswer(body []byte, key signer.PublicKey, text string, v note.Verifier) ([]byte, error) {
	env, err := checkEnvelope(body, key, PayloadCheckpointNote)
	if err != nil {
		return nil, err
	}
	n, err := note.Open(env.Payload, note.VerifierList(v))
	switch {
	case err != nil:
		return nil, fmt.Errorf("the Envelope's payload is not a note signed by %s: %w", v.Name(), err)
	case n.Text != text:
		return nil, errors.New("the signed note's text is not the checkpoint sent")
	case len(n.Sigs) != 1 || len(n.UnverifiedSigs) != 0:
		return nil, fmt.Errorf("the signed note carries %d signatures, want the log key's only", len(n.Sigs)+len(n.UnverifiedSigs))
	}
	want := []byte(text + "\n\u2014 " + v.Name() + " " + n.Sigs[0].Base64 + "\n")
	sig, _ := base64.StdEncoding.DecodeString(n.Sigs[0].Base64) // note.Open decoded it
	if !bytes.Equal(env.Payload, want) || base64.StdEncoding.EncodeToString(sig) != n.Sigs[0].Base64 {
		return nil, errors.New("the signed note is not in the form note.Sign writes (one line, standard base64)")
	}
	return env.Payload, nil
}

// signNote signs a checkpoint text (ParseCheckpointText took it) as a C2SP note under
// its origin with the log key: the payload of the signer's answer.
func signNote(key *signer.Key, text []byte) ([]byte, error) {
	origin, _, _ := strings.Cut(string(text), "\n")
	ns, err := signer.NewNoteSigner(origin, key)
	if err != nil {
		return nil, err
	}
	return note.Sign(&note.Note{Text: string(text)}, ns)
}
