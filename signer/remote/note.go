package remote

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/note"

	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
)

// C2SP checkpoints through the signer.
//
// Besides tree heads the signer signs one other thing: the text of a C2SP
// tlog-checkpoint (https://c2sp.org/tlog-checkpoint), exactly three lines
//
//	<origin>
//	<tree size, decimal>
//	<root hash, standard base64>
//
// posted to /sign as payloadType PayloadCheckpointNote with the text as payload. It
// answers 200 {"signature": "<base64 Ed25519 signature over the text>"}: the log
// makes the note's signature line from it (note.Sign, the key named by the origin).
// The text is signed as is, not in DSSE's pre-authentication encoding, since a note
// verifier checks the signature over the text itself; the three-line form, an origin
// that may not start with "DSSEv1" and a 32-byte root keep it apart from anything
// else the key signs.
//
// Checkpoints are append-only as tree heads are, in a chain of their own per origin
// (state key "c2sp-checkpoint:<origin>"): a larger checkpoint needs a consistency
// proof from the last one signed for its origin, the same size the same root, and a
// smaller one is refused (409 with the last one), so no stolen token makes the signer
// show a witness two histories of one origin.

// PayloadCheckpointNote is the payloadType of a C2SP checkpoint text sent to /sign.
const PayloadCheckpointNote = "application/vnd.svc.c2sp-checkpoint"

// checkpointKeyPrefix starts the state key of an origin's checkpoint chain.
const checkpointKeyPrefix = "c2sp-checkpoint:"

// maxOrigin caps a checkpoint's origin line.
const maxOrigin = 1024

// NoteSignature is the answer of /sign to a checkpoint text.
type NoteSignature struct {
	Signature receipt.Base64 `json:"signature"`
}

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
	c      *Client
	origin string
	tenant string
	tree   receipt.HeadTree
	vkey   string
	hash   uint32
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
	return &NoteSigner{c: c, origin: origin, tenant: tenant, tree: tree, vkey: vkey, hash: v.KeyHash()}, nil
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
		sig, err := n.c.signText(ctx, req)
		if err == nil {
			n.c.heads.set(SignedHead{Log: key, TreeSize: size, RootHash: root.String()})
			return note.Sign(&note.Note{Text: text}, fixedSigner{n: n, sig: sig})
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

// signText posts a checkpoint text to /sign and checks the signature it gets back.
func (c *Client) signText(ctx context.Context, req *SignRequest) ([]byte, error) {
	reqBody, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	body, err := c.do(ctx, http.MethodPost, "/sign", reqBody, true)
	if err != nil {
		return nil, err
	}
	var ans NoteSignature
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ans); err != nil {
		return nil, fmt.Errorf("%w: %s/sign answered a checkpoint with %w", ErrBadResponse, c.base, err)
	}
	if !ed25519.Verify(c.key.Key, req.Payload, ans.Signature) {
		return nil, fmt.Errorf("%w: %s/sign: the checkpoint signature does not verify against keyid %s", ErrBadResponse, c.base, c.key.KeyID)
	}
	return ans.Signature, nil
}

// fixedSigner hands note.Sign a signature the signer made.
type fixedSigner struct {
	n   *NoteSigner
	sig []byte
}

func (f fixedSigner) Name() string                { return f.n.origin }
func (f fixedSigner) KeyHash() uint32             { return f.n.hash }
func (f fixedSigner) Sign([]byte) ([]byte, error) { return f.sig, nil }
