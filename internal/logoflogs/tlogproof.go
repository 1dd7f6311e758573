package logoflogs

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"

	"svc.dev/svc/merkle"
)

// A Proof's text form is C2SP tlog-proof (https://c2sp.org/tlog-proof):
//
//	c2sp.org/tlog-proof@v1
//	extra <base64 of the tenant's signed checkpoint note>
//	index <leaf index>
//	<base64 inclusion hash, one a line, from the leaf's sibling up>
//
//	<the log of logs' checkpoint, cosignatures included, verbatim>
//
// The extra data is the entry itself (the leaf of the log of logs is the tenant's
// checkpoint note): a verifier hashes it to the leaf, so it needs no trust of its own.

// ProofHeader is the first line of a C2SP tlog-proof.
const ProofHeader = "c2sp.org/tlog-proof@v1"

// MaxProofBytes caps a tlog-proof ParseProof reads: two signed notes (each well under
// 16 KiB) and at most 63 hashes.
const MaxProofBytes = 64 << 10

// Marshal is p in C2SP tlog-proof's text form.
func (p *Proof) Marshal() []byte {
	var b bytes.Buffer
	b.WriteString(ProofHeader + "\n")
	b.WriteString("extra " + base64.StdEncoding.EncodeToString(p.Checkpoint) + "\n")
	b.WriteString("index " + strconv.FormatUint(p.Index, 10) + "\n")
	for _, h := range p.Inclusion {
		b.WriteString(base64.StdEncoding.EncodeToString(h[:]) + "\n")
	}
	b.WriteString("\n")
	b.Write(p.Witnessed)
	return b.Bytes()
}

// ErrProof wraps every reason ParseProof refuses its input.
var ErrProof = errors.New("not a C2SP tlog-proof of the log of logs")

// ParseProof reads a tlog-proof Marshal wrote: the extra line (the tenant's
// checkpoint) is required, the index canonical decimal, each hash 32 bytes of
// standard base64. It checks the form only; Verify checks what it proves.
func ParseProof(data []byte) (*Proof, error) {
	if len(data) > MaxProofBytes {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrProof, len(data), MaxProofBytes)
	}
	head, witnessed, ok := bytes.Cut(data, []byte("\n\n"))
	if !ok || len(witnessed) == 0 {
		return nil, fmt.Errorf("%w: no empty line before the checkpoint", ErrProof)
	}
	lines := bytes.Split(head, []byte("\n"))
	if len(lines) < 3 || string(lines[0]) != ProofHeader {
		return nil, fmt.Errorf("%w: the first line is not %s", ErrProof, ProofHeader)
	}
	extra, ok := bytes.CutPrefix(lines[1], []byte("extra "))
	if !ok {
		return nil, fmt.Errorf("%w: no extra line (the tenant's checkpoint)", ErrProof)
	}
	p := &Proof{Witnessed: witnessed}
	var err error
	if p.Checkpoint, err = base64.StdEncoding.Strict().DecodeString(string(extra)); err != nil || len(p.Checkpoint) == 0 {
		return nil, fmt.Errorf("%w: extra is not base64 of a checkpoint", ErrProof)
	}
	index, ok := bytes.CutPrefix(lines[2], []byte("index "))
	if p.Index, err = strconv.ParseUint(string(index), 10, 64); !ok || err != nil || strconv.FormatUint(p.Index, 10) != string(index) {
		return nil, fmt.Errorf("%w: %q is not index <decimal>", ErrProof, lines[2])
	}
	hashes := lines[3:]
	if len(hashes) > merkle.MaxLevel {
		return nil, fmt.Errorf("%w: %d inclusion hashes, at most %d", ErrProof, len(hashes), merkle.MaxLevel)
	}
	for i, line := range hashes {
		h, err := base64.StdEncoding.Strict().DecodeString(string(line))
		if err != nil || len(h) != merkle.HashSize {
			return nil, fmt.Errorf("%w: inclusion line %d is not a base64 hash", ErrProof, i+1)
		}
		p.Inclusion = append(p.Inclusion, merkle.Hash(h))
	}
	return p, nil
}
