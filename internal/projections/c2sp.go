package projections

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// C2SP forms of a checkpoint, so existing witnesses (C2SP tlog-witness) can witness
// the log.
//
// The checkpoint is a C2SP tlog-checkpoint signed note:
//
//	<origin>
//	<tree size, decimal>
//	<root hash, standard base64>
//
//	— <origin> <base64(key hash ‖ Ed25519 signature)>
//
// The origin line names the log: the tenant's log id, the name its signed tree heads
// carry, which is the operator's when one is configured (operators should choose a
// schema-less URL such as "log.example.com/acme"; the portal gives "<host>/<tenant>"),
// else receipt.DefaultLogID, "svc-log/<tenant>". The origin names no key, so a key
// rotation keeps the log's identity: witnesses key their state by origin and go on
// checking that the new key's checkpoints extend what they cosigned under the old
// (docs/design/c2sp.md, "Key rotation"). The note key name is the origin, as C2SP
// recommends.

// DefaultOrigin is the origin line of a tenant's checkpoints: its log id, else
// receipt.DefaultLogID(tenant).
func DefaultOrigin(logID, tenant string) string {
	if logID != "" {
		return logID
	}
	return receipt.DefaultLogID(tenant)
}

// NoteSigner signs checkpoint notes with the log key (in-process keys only).
type NoteSigner struct{ *signer.NoteSigner }

// NewNoteSigner makes the note signer of origin for key, and its verifier key.
func NewNoteSigner(origin string, key *signer.Key) (*NoteSigner, error) {
	s, err := signer.NewNoteSigner(origin, key)
	if err != nil {
		return nil, err
	}
	return &NoteSigner{s}, nil
}

// SignCheckpoint signs the checkpoint at size with root (NoteSigning).
func (s *NoteSigner) SignCheckpoint(_ context.Context, size uint64, root merkle.Hash) ([]byte, error) {
	return SignCheckpointNote(s, size, root)
}

// CheckpointBody is the text of a C2SP checkpoint.
func CheckpointBody(origin string, size uint64, root merkle.Hash) string {
	return fmt.Sprintf("%s\n%d\n%s\n", origin, size, base64.StdEncoding.EncodeToString(root[:]))
}

// SignCheckpointNote signs a checkpoint body as a note.
func SignCheckpointNote(s *NoteSigner, size uint64, root merkle.Hash) ([]byte, error) {
	return note.Sign(&note.Note{Text: CheckpointBody(s.Name(), size, root)}, s)
}

// ErrWitnessConflict: the witness holds a different size than we said it had
// (C2SP tlog-witness 409); Size is what it has.
type ErrWitnessConflict struct{ Size uint64 }

func (e *ErrWitnessConflict) Error() string {
	return fmt.Sprintf("witness has size %d", e.Size)
}

// AddCheckpoint sends a signed checkpoint note to a C2SP tlog-witness
// (POST <witness>/add-checkpoint) with a consistency proof from oldSize, and returns
// the cosignature lines it answers with.
func AddCheckpoint(ctx context.Context, client *http.Client, witness string, oldSize uint64, proof []merkle.Hash, signedNote []byte) ([]byte, error) {
	b := bytes.NewBuffer(AddCheckpointBody(oldSize, proof, signedNote))
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(witness, "/")+"/add-checkpoint", b)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch resp.StatusCode {
	case http.StatusOK:
		if !bytes.HasPrefix(body, []byte("— ")) {
			return nil, fmt.Errorf("witness %s answered 200 without a cosignature line", witness)
		}
		return body, nil
	case http.StatusConflict:
		n, err := strconv.ParseUint(strings.TrimSpace(string(body)), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("witness %s answered 409 without a size: %q", witness, body)
		}
		return nil, &ErrWitnessConflict{Size: n}
	}
	return nil, fmt.Errorf("witness %s answered %s: %s", witness, resp.Status, strings.TrimSpace(string(body)))
}

// AddCheckpointBody is a C2SP add-checkpoint request body: the old size line, the
// proof lines, a blank line and the signed note.
func AddCheckpointBody(oldSize uint64, proof []merkle.Hash, signedNote []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "old %d\n", oldSize)
	for _, h := range proof {
		b.WriteString(base64.StdEncoding.EncodeToString(h[:]) + "\n")
	}
	b.WriteString("\n")
	b.Write(signedNote)
	return b.Bytes()
}

// cosign asks each witness to cosign the note and appends what they answer.
func (c *Checkpointer) cosign(ctx context.Context, size uint64, signed []byte) []byte {
	out := bytes.Clone(signed)
	for _, w := range c.Witnesses {
		old := c.witnessed[w]
		var sigs []byte
		var err error
		for attempt := 0; attempt < 2; attempt++ {
			var proof []merkle.Hash
			if old > 0 && old < size {
				if proof, err = c.Tree.ConsistencyProof(old, size); err != nil {
					break
				}
			}
			sigs, err = AddCheckpoint(ctx, c.client(), w, old, proof, signed)
			var conflict *ErrWitnessConflict
			if errors.As(err, &conflict) && conflict.Size <= size {
				old = conflict.Size // the witness tells us where it is; prove from there
				continue
			}
			break
		}
		if err != nil {
			c.Logger.Warn("witness did not cosign the checkpoint", "tenant", c.Tenant, "witness", w, "size", size, "err", err)
			continue
		}
		c.witnessed[w] = size
		c.Telemetry.Witnessed(c.Tenant, w, size, c.Now())
		out = append(out, sigs...)
	}
	return out
}

func (c *Checkpointer) client() *http.Client {
	if c.HTTPClient != nil {
		return c.HTTPClient
	}
	return http.DefaultClient
}
