package receipt_test

import (
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// chainFixture is a principal, three agents with their own keys, and a grant
// chain of depth 1 to 4 below the principal, all valid at baseTime.
type chainFixture struct {
	principal *signer.Key
	agents    []*signer.Key // agents[i] is the key of agent-(i+1)
	envs      []*receipt.Envelope
	trusted   []signer.PublicKey
}

func pub(k *signer.Key) *signer.PublicKey { p := k.Public(); return &p }

func signGrant(t testing.TB, g *receipt.Grant, k *signer.Key) *receipt.Envelope {
	t.Helper()
	e, err := receipt.SignJSON(receipt.PayloadDelegation, g, k)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func newChain(t testing.TB) *chainFixture {
	t.Helper()
	f := &chainFixture{principal: testKey(t, 10)}
	for i := range 4 {
		f.agents = append(f.agents, testKey(t, byte(11+i)))
	}
	f.trusted = []signer.PublicKey{testKey(t, 99).Public(), f.principal.Public()}
	// depth 1: principal -> agent-1, may delegate with agents[0]
	root := receipt.NewGrant("alice", "agent-1", []string{"read", "write", "search"},
		baseTime.Add(-time.Hour), 24*time.Hour, pub(f.agents[0]), nil)
	f.envs = append(f.envs, signGrant(t, root, f.principal))
	// depth 2: agent-1 -> agent-2
	g2 := receipt.NewGrant("alice", "agent-2", []string{"read", "search"},
		baseTime.Add(-30*time.Minute), 12*time.Hour, pub(f.agents[1]), f.envs[0])
	f.envs = append(f.envs, signGrant(t, g2, f.agents[0]))
	// depth 3: agent-2 -> agent-3
	g3 := receipt.NewGrant("alice", "agent-3", []string{"read"},
		baseTime.Add(-20*time.Minute), 6*time.Hour, pub(f.agents[2]), f.envs[1])
	f.envs = append(f.envs, signGrant(t, g3, f.agents[1]))
	// depth 4: agent-3 -> agent-4 (one too deep)
	g4 := receipt.NewGrant("alice", "agent-4", []string{"read"},
		baseTime.Add(-10*time.Minute), time.Hour, nil, f.envs[2])
	f.envs = append(f.envs, signGrant(t, g4, f.agents[2]))
	return f
}

func TestGrantRoundTrip(t *testing.T) {
	k := testKey(t, 10)
	agentKey := testKey(t, 11).Public()
	g := receipt.NewGrant("alice", "agent-1", []string{"read", "write"}, timeAt(123), 2*time.Hour, &agentKey, nil)
	if g.Version != "0.1" || g.IssuedAt != "2026-11-22T00:00:00.123Z" || g.ExpiresAt != "2026-11-22T02:00:00.123Z" {
		t.Errorf("NewGrant = %+v", g)
	}
	env := signGrant(t, g, k)
	if env.PayloadType != "application/vnd.svc.delegation+json" {
		t.Errorf("payloadType = %s", env.PayloadType)
	}
	// SPEC.md field names, and nothing else.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(env.Payload, &fields); err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range fields {
		names = append(names, n)
	}
	sort.Strings(names)
	if want := []string{"agent", "agentKey", "expiresAt", "issuedAt", "principal", "scopes", "version"}; !slices.Equal(names, want) {
		t.Errorf("payload fields = %v, want %v", names, want)
	}
	if _, err := signer.ParsePublicKeyPEM([]byte(g.AgentKey)); err != nil || !strings.HasPrefix(g.AgentKey, "-----BEGIN PUBLIC KEY-----") {
		t.Errorf("agentKey is not an SPKI PEM: %q %v", g.AgentKey, err)
	}

	got, err := receipt.DecodeGrant(env)
	if err != nil {
		t.Fatal(err)
	}
	if got.Principal != "alice" || got.Agent != "agent-1" || !slices.Equal(got.Scopes, []string{"read", "write"}) ||
		got.IssuedAt != g.IssuedAt || got.ExpiresAt != g.ExpiresAt || got.AgentKey != g.AgentKey || got.Parent != nil {
		t.Errorf("DecodeGrant = %+v", got)
	}
	c, key, err := receipt.VerifyGrant(env, []signer.PublicKey{k.Public()}, timeAt(1000))
	if err != nil {
		t.Fatal(err)
	}
	if key.KeyID != k.KeyID() || c.Depth() != 1 || c.Root() != c.Leaf() || c.Leaf().Agent != "agent-1" {
		t.Errorf("chain = %+v, key %s", c, key.KeyID)
	}
	// Without agentKey the field is absent; a chained grant carries "parent".
	g2 := receipt.NewGrant("alice", "b", []string{"read"}, timeAt(0), time.Hour, nil, env)
	env2 := signGrant(t, g2, testKey(t, 11))
	fields = nil
	_ = json.Unmarshal(env2.Payload, &fields)
	if _, ok := fields["agentKey"]; ok {
		t.Error("agentKey present although nil")
	}
	var parent receipt.Envelope
	if err := json.Unmarshal(fields["parent"], &parent); err != nil || string(parent.Canonical()) != string(env.Canonical()) {
		t.Errorf("parent = %s, %v", fields["parent"], err)
	}
}

func TestVerifyGrantChainDepths(t *testing.T) {
	f := newChain(t)
	for depth := 1; depth <= 3; depth++ {
		c, key, err := receipt.VerifyGrant(f.envs[depth-1], f.trusted, baseTime)
		if err != nil {
			t.Fatalf("depth %d: %v", depth, err)
		}
		if c.Depth() != depth {
			t.Errorf("depth %d: Depth() = %d", depth, c.Depth())
		}
		if key.KeyID != f.principal.KeyID() {
			t.Errorf("depth %d: root signed by %s, want the principal", depth, key.KeyID)
		}
		if c.Root().Agent != "agent-1" || c.Root().Principal != "alice" {
			t.Errorf("depth %d: root = %+v", depth, c.Root())
		}
		if want := "agent-" + string(rune('0'+depth)); c.Leaf().Agent != want {
			t.Errorf("depth %d: leaf agent = %s, want %s", depth, c.Leaf().Agent, want)
		}
		if len(c.Envelopes) != depth || c.Envelopes[depth-1] != f.envs[depth-1] {
			t.Errorf("depth %d: envelopes not root first", depth)
		}
		for i, e := range c.Envelopes {
			if string(e.Canonical()) != string(f.envs[i].Canonical()) {
				t.Errorf("depth %d: envelope %d is not grant %d", depth, i, i)
			}
		}
	}
	// Depth 4 is one delegation too many.
	_, _, err := receipt.VerifyGrant(f.envs[3], f.trusted, baseTime)
	if !errors.Is(err, receipt.ErrGrantChain) {
		t.Errorf("depth 4: err = %v, want ErrGrantChain", err)
	}
	c, err := receipt.UnwrapChain(f.envs[3])
	if err != nil {
		t.Fatalf("UnwrapChain reads a chain of 4: %v", err)
	}
	if err := c.VerifyLinks(); !errors.Is(err, receipt.ErrGrantChain) {
		t.Errorf("VerifyLinks depth 4: %v", err)
	}
	if _, err := c.VerifyRoot(f.trusted); err != nil {
		t.Errorf("VerifyRoot of the depth-4 chain: %v", err)
	}
}

func TestVerifyGrantRefusals(t *testing.T) {
	f := newChain(t)
	parentEnv := f.envs[0] // agent-1's grant; agents[0] may delegate
	child := func(mod func(g *receipt.Grant)) *receipt.Grant {
		g := receipt.NewGrant("alice", "agent-2", []string{"read"}, baseTime.Add(-30*time.Minute), time.Hour, nil, parentEnv)
		if mod != nil {
			mod(g)
		}
		return g
	}
	cases := []struct {
		name string
		env  *receipt.Envelope
		at   time.Time
		want error
	}{
		{"extra scope", signGrant(t, child(func(g *receipt.Grant) { g.Scopes = []string{"read", "delete"} }), f.agents[0]), baseTime, receipt.ErrGrantChain},
		{"starts before parent", signGrant(t, child(func(g *receipt.Grant) {
			g.IssuedAt = receipt.FormatTime(baseTime.Add(-2 * time.Hour))
		}), f.agents[0]), baseTime, receipt.ErrGrantChain},
		{"ends after parent", signGrant(t, child(func(g *receipt.Grant) {
			g.ExpiresAt = receipt.FormatTime(baseTime.Add(23*time.Hour + time.Millisecond))
		}), f.agents[0]), baseTime, receipt.ErrGrantChain},
		{"signed by the principal, not the parent's agentKey", signGrant(t, child(nil), f.principal), baseTime, receipt.ErrGrantChain},
		{"signed by the child's own key", signGrant(t, child(nil), f.agents[1]), baseTime, receipt.ErrGrantChain},
		{"unsigned child", receipt.Sign(receipt.PayloadDelegation, signGrant(t, child(nil), f.agents[0]).Payload), baseTime, receipt.ErrGrantChain},
		{"principal changed", signGrant(t, child(func(g *receipt.Grant) { g.Principal = "mallory" }), f.agents[0]), baseTime, receipt.ErrGrantChain},
		{"parent without agentKey", signGrant(t,
			receipt.NewGrant("alice", "x", []string{"read"}, baseTime.Add(-time.Minute), time.Hour, nil, signGrant(t,
				receipt.NewGrant("alice", "agent-1", []string{"read"}, baseTime.Add(-time.Hour), 24*time.Hour, nil, nil), f.principal)),
			f.agents[0]), baseTime, receipt.ErrGrantChain},
		{"root by an untrusted key", signGrant(t,
			receipt.NewGrant("alice", "agent-1", []string{"read"}, baseTime.Add(-time.Hour), 2*time.Hour, nil, nil), testKey(t, 50)),
			baseTime, receipt.ErrGrantUntrusted},
		{"root signed by its own agent", signGrant(t,
			receipt.NewGrant("alice", "agent-1", []string{"read"}, baseTime.Add(-time.Hour), 2*time.Hour, nil, nil), f.agents[0]),
			baseTime, receipt.ErrGrantUntrusted},
		{"expired root", f.envs[0], baseTime.Add(23*time.Hour + time.Millisecond), receipt.ErrGrantWindow},
		{"expired leaf", f.envs[2], baseTime.Add(6 * time.Hour), receipt.ErrGrantWindow},
		{"not yet valid", f.envs[0], baseTime.Add(-time.Hour - time.Millisecond), receipt.ErrGrantWindow},
		{"issuedAt after expiresAt", signGrant(t, &receipt.Grant{Version: "0.1", Principal: "alice", Agent: "a", Scopes: []string{},
			IssuedAt: "2026-11-22T01:00:00.000Z", ExpiresAt: "2026-11-22T00:00:00.000Z"}, f.principal), baseTime, receipt.ErrGrantMalformed},
		{"empty window", signGrant(t, receipt.NewGrant("alice", "a", []string{}, baseTime, 0, nil, nil), f.principal), baseTime, receipt.ErrGrantMalformed},
		{"negative ttl", signGrant(t, receipt.NewGrant("alice", "a", []string{}, baseTime, -time.Hour, nil, nil), f.principal), baseTime, receipt.ErrGrantMalformed},
		{"child window inverted", signGrant(t, child(func(g *receipt.Grant) {
			g.IssuedAt, g.ExpiresAt = g.ExpiresAt, g.IssuedAt
		}), f.agents[0]), baseTime, receipt.ErrGrantMalformed},
		{"bad time", signGrant(t, &receipt.Grant{Version: "0.1", Principal: "alice", Agent: "a", Scopes: []string{},
			IssuedAt: "yesterday", ExpiresAt: "2026-11-22T00:00:00.000Z"}, f.principal), baseTime, receipt.ErrGrantMalformed},
		{"wrong version", signGrant(t, &receipt.Grant{Version: "0.2", Principal: "alice", Agent: "a", Scopes: []string{},
			IssuedAt: "2026-11-21T00:00:00Z", ExpiresAt: "2026-11-23T00:00:00Z"}, f.principal), baseTime, receipt.ErrGrantMalformed},
		{"missing scopes", receipt.Sign(receipt.PayloadDelegation, []byte(
			`{"version":"0.1","principal":"alice","agent":"a","issuedAt":"2026-11-21T00:00:00Z","expiresAt":"2026-11-23T00:00:00Z"}`), f.principal),
			baseTime, receipt.ErrGrantMalformed},
		{"empty principal", signGrant(t, &receipt.Grant{Version: "0.1", Principal: "", Agent: "a", Scopes: []string{},
			IssuedAt: "2026-11-21T00:00:00Z", ExpiresAt: "2026-11-23T00:00:00Z"}, f.principal), baseTime, receipt.ErrGrantMalformed},
		{"unknown field", receipt.Sign(receipt.PayloadDelegation, []byte(
			`{"version":"0.1","principal":"alice","agent":"a","scopes":[],"issuedAt":"2026-11-21T00:00:00Z","expiresAt":"2026-11-23T00:00:00Z","admin":true}`), f.principal),
			baseTime, receipt.ErrGrantMalformed},
		{"wrong payload type", receipt.Sign(receipt.PayloadInToto, f.envs[0].Payload, f.principal), baseTime, receipt.ErrGrantMalformed},
		{"parent of wrong payload type", signGrant(t, child(func(g *receipt.Grant) {
			g.Parent = receipt.Sign(receipt.PayloadInToto, parentEnv.Payload, f.principal)
		}), f.agents[0]), baseTime, receipt.ErrGrantMalformed},
	}
	for _, c := range cases {
		_, _, err := receipt.VerifyGrant(c.env, f.trusted, c.at)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
	// The valid child passes, at both ends of its window.
	ok := signGrant(t, child(nil), f.agents[0])
	for _, at := range []time.Time{baseTime.Add(-30 * time.Minute), baseTime.Add(30 * time.Minute)} {
		if _, _, err := receipt.VerifyGrant(ok, f.trusted, at); err != nil {
			t.Errorf("valid child at %s: %v", at, err)
		}
	}
	// A tampered root payload breaks the principal's signature.
	tampered := *f.envs[0]
	tampered.Payload = []byte(strings.Replace(string(f.envs[0].Payload), `"read"`, `"admin"`, 1))
	if _, _, err := receipt.VerifyGrant(&tampered, f.trusted, baseTime); !errors.Is(err, receipt.ErrGrantUntrusted) {
		t.Errorf("tampered root: %v", err)
	}
	// A child that swaps in a different (validly signed) parent is no longer
	// signed by that parent's agentKey.
	otherRoot := signGrant(t, receipt.NewGrant("alice", "agent-1", []string{"read", "delete"},
		baseTime.Add(-time.Hour), 24*time.Hour, pub(testKey(t, 60)), nil), f.principal)
	var g receipt.Grant
	_ = json.Unmarshal(ok.Payload, &g)
	g.Parent = otherRoot
	g.Scopes = []string{"delete"}
	if _, _, err := receipt.VerifyGrant(signGrant(t, &g, f.agents[0]), f.trusted, baseTime); !errors.Is(err, receipt.ErrGrantChain) {
		t.Errorf("swapped parent: %v", err)
	}
}

func TestUnwrapChainBoundsDepth(t *testing.T) {
	k := testKey(t, 10)
	var env *receipt.Envelope
	for i := range 17 {
		g := receipt.NewGrant("alice", "a", []string{"read"}, baseTime, time.Hour, pub(k), env)
		env = signGrant(t, g, k)
		c, err := receipt.UnwrapChain(env)
		if i < 16 {
			if err != nil || c.Depth() != i+1 {
				t.Fatalf("depth %d: %v", i+1, err)
			}
			if i+1 > receipt.MaxChainDepth {
				if err := c.VerifyLinks(); !errors.Is(err, receipt.ErrGrantChain) {
					t.Errorf("depth %d: VerifyLinks = %v", i+1, err)
				}
			} else if err := c.VerifyLinks(); err != nil {
				t.Errorf("depth %d: VerifyLinks = %v", i+1, err)
			}
			continue
		}
		if !errors.Is(err, receipt.ErrGrantMalformed) {
			t.Errorf("depth 17: UnwrapChain err = %v, want ErrGrantMalformed", err)
		}
	}
}

func TestCheckDelegation(t *testing.T) {
	parent := receipt.NewGrant("alice", "agent-1", []string{"read", "write"}, baseTime, 10*time.Hour, nil, nil)
	end := baseTime.Add(10 * time.Hour)
	ok := []struct {
		name     string
		scopes   []string
		from, to time.Time
	}{
		{"same scopes and window", []string{"read", "write"}, baseTime, end},
		{"subset", []string{"write"}, baseTime.Add(time.Hour), end.Add(-time.Hour)},
		{"no scopes", []string{}, baseTime, end},
		{"nil scopes", nil, baseTime, end},
		{"repeated scope", []string{"read", "read"}, baseTime, end},
	}
	for _, c := range ok {
		if err := receipt.CheckDelegation(parent, c.scopes, c.from, c.to); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	bad := []struct {
		name     string
		scopes   []string
		from, to time.Time
		mention  string
	}{
		{"extra scope", []string{"read", "delete"}, baseTime, end, `"delete"`},
		{"scope differs in case", []string{"Read"}, baseTime, end, `"Read"`},
		{"starts early", []string{"read"}, baseTime.Add(-time.Millisecond), end, "outside"},
		{"ends late", []string{"read"}, baseTime, end.Add(time.Millisecond), "outside"},
		{"wider on both sides", []string{"read"}, baseTime.Add(-time.Hour), end.Add(time.Hour), "outside"},
	}
	for _, c := range bad {
		err := receipt.CheckDelegation(parent, c.scopes, c.from, c.to)
		if err == nil {
			t.Errorf("%s: accepted", c.name)
		} else if !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%s: error %q does not mention %s", c.name, err, c.mention)
		}
	}
	broken := &receipt.Grant{Version: "0.1", Scopes: []string{"read"}, IssuedAt: "2026-11-22T01:00:00Z", ExpiresAt: "2026-11-22T00:00:00Z"}
	if err := receipt.CheckDelegation(broken, []string{"read"}, baseTime, baseTime); !errors.Is(err, receipt.ErrGrantMalformed) {
		t.Errorf("malformed parent: %v", err)
	}
}

func TestGrantValidAtAndScope(t *testing.T) {
	g := receipt.NewGrant("alice", "a", []string{"read"}, baseTime, time.Hour, nil, nil)
	for _, at := range []time.Time{baseTime, baseTime.Add(30 * time.Minute), baseTime.Add(time.Hour)} {
		if err := g.ValidAt(at); err != nil {
			t.Errorf("ValidAt(%s) = %v", at, err)
		}
	}
	for _, at := range []time.Time{baseTime.Add(-time.Millisecond), baseTime.Add(time.Hour + time.Millisecond)} {
		if err := g.ValidAt(at); !errors.Is(err, receipt.ErrGrantWindow) {
			t.Errorf("ValidAt(%s) = %v, want ErrGrantWindow", at, err)
		}
	}
	if !g.HasScope("read") || g.HasScope("write") || g.HasScope("") {
		t.Error("HasScope")
	}
	// Any RFC 3339 time is accepted on input, with any offset.
	g.IssuedAt = "2026-11-22T01:00:00+01:00"
	g.ExpiresAt = "2026-11-22T00:00:01.5Z"
	if err := g.ValidAt(baseTime.Add(time.Second)); err != nil {
		t.Errorf("offset times: %v", err)
	}
	from, to, err := g.Window()
	if err != nil || !from.Equal(baseTime) || !to.Equal(timeAt(1500)) {
		t.Errorf("Window = %s %s %v", from, to, err)
	}
	if receipt.FormatTime(time.Date(2026, 11, 22, 2, 3, 4, 5e6, time.FixedZone("x", 3600))) != "2026-11-22T01:03:04.005Z" {
		t.Error("FormatTime is not UTC with milliseconds")
	}
}
