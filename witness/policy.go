package witness

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"

	"svc.dev/svc/merkle"
	"svc.dev/svc/signer"
)

// Policy is a C2SP tlog-policy (https://c2sp.org/tlog-policy): the logs whose
// checkpoints are accepted, the witnesses, and the quorum of witnesses that must have
// cosigned a checkpoint. svc log-check --policy and svc verify --policy read one.
//
//	log <vkey> [<url>]
//	witness <name> <vkey> [<url>]
//	group <name> all|any|<k> <name>...
//	quorum <name>|none
//
// Log vkeys are Ed25519 note keys (their name is the origin); witness vkeys are
// tlog-cosignature/v1 keys (algorithm 0x04). Names must be defined before a group or
// the quorum names them; a member is listed at most once in a group.
type Policy struct {
	Logs      []note.Verifier
	LogURLs   []string
	Witnesses map[string]*CosignatureVerifier
	groups    map[string]group
	quorum    string // "none": no cosignature needed
}

type group struct {
	k       int
	members []string
}

// Limits of a policy.
const (
	maxPolicyBytes = 64 << 10
	maxPolicyItems = 256
)

// ParsePolicy parses a tlog-policy file; the error names the line and what was wrong.
func ParsePolicy(data []byte) (*Policy, error) {
	if len(data) > maxPolicyBytes {
		return nil, fmt.Errorf("policy: over %d bytes", maxPolicyBytes)
	}
	p := &Policy{Witnesses: map[string]*CosignatureVerifier{}, groups: map[string]group{}}
	keys := map[string]bool{}
	for i, line := range strings.Split(string(data), "\n") {
		if err := p.parseLine(line, keys); err != nil {
			return nil, fmt.Errorf("policy line %d: %w", i+1, err)
		}
		if len(p.Logs)+len(p.Witnesses)+len(p.groups) > maxPolicyItems {
			return nil, fmt.Errorf("policy: more than %d logs, witnesses and groups", maxPolicyItems)
		}
	}
	if p.quorum == "" {
		return nil, errors.New("policy: no quorum line (use \"quorum none\" for no cosignatures)")
	}
	return p, nil
}

func (p *Policy) parseLine(line string, keys map[string]bool) error {
	if bytes.ContainsFunc([]byte(line), func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) {
		return errors.New("control characters other than tab")
	}
	f := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' })
	if len(f) == 0 || strings.HasPrefix(f[0], "#") {
		return nil
	}
	switch {
	case f[0] == "log" && (len(f) == 2 || len(f) == 3):
		v, err := note.NewVerifier(f[1])
		if err != nil {
			return fmt.Errorf("log key: %w", err)
		}
		if keys[keyMaterial(f[1])] {
			return errors.New("duplicate key")
		}
		keys[keyMaterial(f[1])] = true
		p.Logs, p.LogURLs = append(p.Logs, v), append(p.LogURLs, at(f, 2))
	case f[0] == "witness" && (len(f) == 3 || len(f) == 4):
		if err := p.newName(f[1]); err != nil {
			return err
		}
		v, err := NewCosignatureVerifier(f[2])
		if err != nil {
			return err
		}
		if keys[keyMaterial(f[2])] {
			return errors.New("duplicate key")
		}
		keys[keyMaterial(f[2])] = true
		p.Witnesses[f[1]] = v
	case f[0] == "group" && len(f) >= 4:
		return p.parseGroup(f[1], f[2], f[3:])
	case f[0] == "quorum" && len(f) == 2:
		if p.quorum != "" {
			return errors.New("a second quorum line")
		}
		if f[1] != "none" && !p.defined(f[1]) {
			return fmt.Errorf("quorum %q is not a witness or group defined above", f[1])
		}
		p.quorum = f[1]
	default:
		return fmt.Errorf("not a log, witness, group or quorum line: %q", line)
	}
	return nil
}

func (p *Policy) parseGroup(name, kText string, members []string) error {
	if err := p.newName(name); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, m := range members {
		if !p.defined(m) {
			return fmt.Errorf("group member %q is not a witness or group defined above", m)
		}
		if seen[m] {
			return fmt.Errorf("group member %q listed twice", m)
		}
		seen[m] = true
	}
	k := 0
	switch kText {
	case "all":
		k = len(members)
	case "any":
		k = 1
	default:
		n, err := strconv.Atoi(kText)
		if err != nil || n < 1 || n > len(members) || strconv.Itoa(n) != kText {
			return fmt.Errorf("threshold %q: use all, any or a number from 1 to %d", kText, len(members))
		}
		k = n
	}
	p.groups[name] = group{k: k, members: members}
	return nil
}

func (p *Policy) newName(name string) error {
	if name == "none" || p.defined(name) {
		return fmt.Errorf("name %q is reserved or defined twice", name)
	}
	return nil
}

func (p *Policy) defined(name string) bool {
	_, w := p.Witnesses[name]
	_, g := p.groups[name]
	return w || g
}

func at(f []string, i int) string {
	if i < len(f) {
		return f[i]
	}
	return ""
}

// keyMaterial is a vkey's key (after its name and key id), for duplicate checks.
func keyMaterial(vkey string) string {
	parts := strings.SplitN(vkey, "+", 3)
	return parts[len(parts)-1]
}

// Verify opens a cosigned checkpoint note under the policy: it must be signed by one
// of the policy's logs, plus extra (log verifiers the caller knows from elsewhere, such
// as the log key given on the command line), and cosigned by a quorum of its
// witnesses. It returns the note and the names of the witnesses whose cosignatures
// verified.
func (p *Policy) Verify(signed []byte, extra ...note.Verifier) (*note.Note, []string, error) {
	logs := append(append([]note.Verifier{}, p.Logs...), extra...)
	if len(logs) == 0 {
		return nil, nil, errors.New("policy names no log and no log key was given")
	}
	vs := append([]note.Verifier{}, logs...)
	byHash := map[*CosignatureVerifier]string{}
	for name, w := range p.Witnesses {
		vs = append(vs, w)
		byHash[w] = name
	}
	n, err := note.Open(signed, note.VerifierList(vs...))
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	logSigned := false
	var cosigned []string
	have := map[string]bool{}
	for _, s := range n.Sigs {
		for _, v := range logs {
			if s.Name == v.Name() && s.Hash == v.KeyHash() {
				logSigned = true
			}
		}
		for w, name := range byHash {
			if s.Name == w.Name() && s.Hash == w.KeyHash() && !have[name] {
				have[name] = true
				cosigned = append(cosigned, name)
			}
		}
	}
	if !logSigned {
		return nil, nil, errors.New("checkpoint: no signature by a log of the policy")
	}
	slices.Sort(cosigned)
	if !p.satisfied(p.quorum, have) {
		return n, cosigned, p.shortOf(cosigned, have)
	}
	return n, cosigned, nil
}

// shortOf is the error of a checkpoint short of the quorum: what the quorum needs, who
// cosigned and which of the quorum's witnesses did not.
func (p *Policy) shortOf(cosigned []string, have map[string]bool) error {
	var missing []string
	p.walk(p.quorum, func(w string) {
		if !have[w] && !slices.Contains(missing, w) {
			missing = append(missing, w)
		}
	})
	slices.Sort(missing)
	who := "no witness of the policy"
	if len(cosigned) > 0 {
		who = strings.Join(cosigned, ", ")
	}
	return fmt.Errorf("checkpoint: the policy's quorum %q is not met: it needs %s; cosigned by %s; no cosignature from %s",
		p.quorum, p.needs(p.quorum), who, strings.Join(missing, ", "))
}

// walk calls f for each witness under name (a witness or group).
func (p *Policy) walk(name string, f func(witness string)) {
	if _, ok := p.Witnesses[name]; ok {
		f(name)
		return
	}
	for _, m := range p.groups[name].members {
		p.walk(m, f)
	}
}

// needs says what name (a witness or group) requires, e.g. "2 of (A, B, C)".
func (p *Policy) needs(name string) string {
	g, ok := p.groups[name]
	if !ok {
		return name
	}
	parts := make([]string, len(g.members))
	for i, m := range g.members {
		parts[i] = p.needs(m)
	}
	return fmt.Sprintf("%d of (%s)", g.k, strings.Join(parts, ", "))
}

// satisfied says whether name (a witness or group) witnessed, given the witnesses that
// cosigned.
func (p *Policy) satisfied(name string, have map[string]bool) bool {
	if name == "none" {
		return true
	}
	if _, ok := p.Witnesses[name]; ok {
		return have[name]
	}
	g := p.groups[name]
	n := 0
	for _, m := range g.members {
		if p.satisfied(m, have) {
			n++
		}
	}
	return n >= g.k
}

// Cosigned is a checkpoint verified under a policy.
type Cosigned struct {
	Origin    string
	Size      uint64
	Root      merkle.Hash
	Witnesses []string // the policy's names of those whose cosignatures verified
}

// VerifyCheckpoint is Verify for a C2SP checkpoint whose log key may also be one of
// logKeys (a log's published keys, named by the checkpoint's origin), returning its
// size and root.
func (p *Policy) VerifyCheckpoint(signed []byte, logKeys []signer.PublicKey) (*Cosigned, error) {
	origin, _, _ := strings.Cut(string(signed), "\n")
	var extra []note.Verifier
	for _, k := range logKeys {
		if vkey, err := note.NewEd25519VerifierKey(origin, k.Key); err == nil {
			if v, err := note.NewVerifier(vkey); err == nil {
				extra = append(extra, v)
			}
		}
	}
	n, names, err := p.Verify(signed, extra...)
	if err != nil {
		return nil, err
	}
	size, root, err := ParseCheckpointBody(n.Text)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return &Cosigned{Origin: origin, Size: size, Root: root, Witnesses: names}, nil
}

// Describe says who cosigned, for reports.
func (c *Cosigned) Describe() string {
	if len(c.Witnesses) == 0 {
		return "no witness (quorum none)"
	}
	return "witnesses " + strings.Join(c.Witnesses, ", ")
}
