package signer

import (
	"golang.org/x/mod/sumdb/note"
)

// NoteSigner signs C2SP signed notes (https://c2sp.org/signed-note, Ed25519, as
// golang.org/x/mod/sumdb/note verifies them) with a Key under a key name: for a
// checkpoint the name is the log's origin. It implements note.Signer.
type NoteSigner struct {
	name string
	hash uint32
	key  *Key
	vkey string
}

// NewNoteSigner makes the note signer of key under name; the name must be a valid note
// key name (non-empty, no spaces, no '+').
func NewNoteSigner(name string, key *Key) (*NoteSigner, error) {
	vkey, err := note.NewEd25519VerifierKey(name, key.pub)
	if err != nil {
		return nil, err
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, err
	}
	return &NoteSigner{name: name, hash: v.KeyHash(), key: key, vkey: vkey}, nil
}

// Name is the key name (note.Signer).
func (s *NoteSigner) Name() string { return s.name }

// KeyHash is the note key hash of the name and key (note.Signer).
func (s *NoteSigner) KeyHash() uint32 { return s.hash }

// Sign signs msg, the note text, with the key (note.Signer).
func (s *NoteSigner) Sign(msg []byte) ([]byte, error) { return s.key.Sign(msg), nil }

// VerifierKey is the note verifier key (name+hash+key) that verifies these signatures.
func (s *NoteSigner) VerifierKey() string { return s.vkey }
