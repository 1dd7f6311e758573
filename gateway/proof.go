package gateway

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"svc.dev/svc/signer"
)

// Proof of possession over HTTP.
//
// A grant travels inside every receipt (delegation.envelope), so holding a receipt
// means holding its grant. When the grant names an agentKey, the bearer form is not
// enough: the agent signs every /mcp request with that key, and whoever holds only
// the grant (from a receipt, a log or a proxy's log) cannot use it.
//
// The header is
//
//	X-Svc-Proof: t=<unix seconds>, sig=<base64url Ed25519 signature>
//
// over the bytes of ProofMessage: the text "svc-proof-v1", then the request method,
// path, session id ("" on initialize and for sessionless clients), t and the hex
// SHA-256 of the body (of the empty string for GET and DELETE), each on its own line.
// t must be within ProofSkew of the gateway's clock, and a signature is accepted once
// (a replayed request is refused). A grant without agentKey is presented as SPEC's
// bearer form; with HTTPConfig.RequireProof (svc gateway --require-proof) such grants
// are refused.
const HeaderProof = "X-Svc-Proof"

// ProofSkew is how far a proof's time may be from the gateway's clock.
const ProofSkew = 5 * time.Minute

// ProofMessage is what an agent signs for one request.
func ProofMessage(method, path, session string, unix int64, body []byte) []byte {
	d := sha256.Sum256(body)
	return fmt.Appendf(nil, "svc-proof-v1\n%s\n%s\n%s\n%d\n%x", method, path, session, unix, d)
}

// SignProof is the X-Svc-Proof header value for one request, signed with the key the
// grant names in agentKey.
func SignProof(key *signer.Key, method, path, session string, at time.Time, body []byte) string {
	sig := key.Sign(ProofMessage(method, path, session, at.Unix(), body))
	return "t=" + strconv.FormatInt(at.Unix(), 10) + ", sig=" + base64.RawURLEncoding.EncodeToString(sig)
}

func parseProof(v string) (int64, []byte, error) {
	var t int64
	var sig []byte
	var haveT, haveSig bool
	for part := range strings.SplitSeq(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return 0, nil, fmt.Errorf("%s: %q is not key=value", HeaderProof, part)
		}
		switch k {
		case "t":
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				return 0, nil, fmt.Errorf("%s: t %q is not unix seconds", HeaderProof, val)
			}
			t, haveT = n, true
		case "sig":
			b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(val, "="))
			if err != nil || len(b) != 64 {
				return 0, nil, fmt.Errorf("%s: sig is not a base64url Ed25519 signature", HeaderProof)
			}
			sig, haveSig = b, true
		default:
			return 0, nil, fmt.Errorf("%s: unknown field %q (want t and sig)", HeaderProof, k)
		}
	}
	if !haveT || !haveSig {
		return 0, nil, fmt.Errorf("%s: want t=<unix seconds>, sig=<base64url signature>", HeaderProof)
	}
	return t, sig, nil
}

// errNoProof: the grant names an agentKey and the request carries no proof.
var errNoProof = errors.New("grant rejected: the grant names an agentKey, so every request must carry " + HeaderProof + ": t=<unix seconds>, sig=<Ed25519 signature by that key over the method, path, session, t and body digest>")

// proofChecker checks the HTTP front's proofs of possession (X-Svc-Proof).
type proofChecker struct {
	require bool             // HTTPConfig.RequireProof
	now     func() time.Time // the gateway's clock
	seen    seenProofs       // proofs of possession accepted, against replays
}

// check verifies a request's proof of possession for grant v.
func (f *proofChecker) check(r *http.Request, v *verifiedGrant, body []byte) error {
	if v.agentKey == nil {
		if f.require {
			return errors.New("grant rejected: this gateway requires proof of possession and the grant names no agentKey; ask the principal for a grant with --agent-key")
		}
		return nil
	}
	h := r.Header.Get(HeaderProof)
	if h == "" {
		return errNoProof
	}
	t, sig, err := parseProof(h)
	if err != nil {
		return fmt.Errorf("grant rejected: %w", err)
	}
	now := f.now()
	if d := now.Sub(time.Unix(t, 0)); d > ProofSkew || d < -ProofSkew {
		return fmt.Errorf("grant rejected: %s t=%d is %v from the gateway's clock (at most %v)", HeaderProof, t, d.Round(time.Second), ProofSkew)
	}
	msg := ProofMessage(r.Method, r.URL.Path, r.Header.Get("Mcp-Session-Id"), t, body)
	if !v.agentKey.Verify(msg, sig) {
		return fmt.Errorf("grant rejected: %s does not verify with the grant's agentKey (keyid %s) over this request", HeaderProof, v.agentKey.KeyID)
	}
	if !f.seen.first(string(sig), time.Unix(t, 0).Add(ProofSkew), now) {
		return fmt.Errorf("grant rejected: %s was used before; sign each request afresh", HeaderProof)
	}
	return nil
}

// seenProofs remembers accepted signatures until their proof's time is past the skew
// window, so a captured request cannot be replayed. Bounded.
type seenProofs struct {
	mu sync.Mutex
	m  map[string]time.Time // signature → when it can be forgotten
}

const maxSeenProofs = 1 << 17

func (s *seenProofs) first(sig string, until, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]time.Time{}
	}
	if _, ok := s.m[sig]; ok {
		return false
	}
	if len(s.m) >= maxSeenProofs {
		for k, u := range s.m {
			if now.After(u) {
				delete(s.m, k)
			}
		}
		if len(s.m) >= maxSeenProofs {
			return false // more live proofs than any fleet of agents sends in the window: refuse rather than forget
		}
	}
	s.m[sig] = until
	return true
}
