package logserver_test

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

func get(t testing.TB, url, token string) (int, http.Header, string) {
	t.Helper()
	return testkit.Do(t, "GET", url, token, "")
}

// checkpointTree reads the tenant's C2SP checkpoint (its size and root).
func checkpointTree(t *testing.T, base string) tlog.Tree {
	t.Helper()
	code, _, body := get(t, base+"/checkpoint", "")
	if code != 200 {
		t.Fatalf("/checkpoint: %d %s", code, body)
	}
	lines := strings.Split(body, "\n")
	n, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		t.Fatalf("checkpoint size %q: %v", lines[1], err)
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != 32 {
		t.Fatalf("checkpoint root %q: %v", lines[2], err)
	}
	var h tlog.Hash
	copy(h[:], root)
	return tlog.Tree{N: n, Hash: h}
}

// TestTilesVerifyWithSumdbTlog: a C2SP client that trusts only the signed checkpoint
// reads our tiles with sumdb/tlog's tile reader (which authenticates every tile
// against the root) and checks inclusion and consistency proofs built from them; the
// entry bundles hold exactly the committed leaves; full tiles are immutable, partial
// ones short-lived; a hash-only leaf's bundle is refused with the reason.
func TestTilesVerifyWithSumdbTlog(t *testing.T) {
	l := logtest.Start(t, logtest.Options{Notes: true, Tenants: []logtest.Tenant{{ID: "open", LogID: "log.example.com/open"}}})
	base := l.Base("open")
	const n, hashOnlyAt = 700, 650
	leaves := make([]string, n)
	for i := range leaves {
		leaves[i] = fmt.Sprintf("entry %d of the tiles test", i)
		if i == hashOnlyAt {
			h := merkle.LeafHash([]byte(leaves[i]))
			if code, _, body := do(t, "POST", base+"/append", "", `{"leafHash":"`+h.String()+`"}`); code != 200 {
				t.Fatalf("hash-only append: %d %s", code, body)
			}
			continue
		}
		code, _, body := do(t, "POST", base+"/add", "", leaves[i])
		if code != 200 || !strings.HasPrefix(body, strconv.Itoa(i)+"\n") {
			t.Fatalf("add %d: %d %q", i, code, body)
		}
	}
	midSize := int64(300)
	midRoot := rootAt(t, base, midSize)
	l.Checkpoint(t, "open")
	tree := checkpointTree(t, base)
	if tree.N != n {
		t.Fatalf("checkpoint size %d, want %d", tree.N, n)
	}
	hr := tlog.TileHashReader(tree, testkit.C2SPTiles{T: t, Base: base})
	for _, i := range []int64{0, 1, 255, 256, 299, 511, 512, 649, hashOnlyAt, 651, n - 1} {
		proof, err := tlog.ProveRecord(tree.N, i, hr)
		if err != nil {
			t.Fatalf("inclusion proof of %d from the tiles: %v", i, err)
		}
		if err := tlog.CheckRecord(proof, tree.N, tree.Hash, i, tlog.RecordHash([]byte(leaves[i]))); err != nil {
			t.Fatalf("inclusion of %d: %v", i, err)
		}
	}
	proof, err := tlog.ProveTree(tree.N, midSize, hr)
	if err != nil {
		t.Fatalf("consistency proof from the tiles: %v", err)
	}
	if err := tlog.CheckTree(proof, tree.N, tree.Hash, midSize, midRoot); err != nil {
		t.Fatalf("consistency %d -> %d: %v", midSize, tree.N, err)
	}

	// Entry bundles: the leaves as committed, in C2SP form (the projection follows
	// the log of record, so it may be a moment behind the tree).
	testkit.Eventually(t, 5*time.Second, func() error {
		if code, _, body := get(t, base+"/tile/entries/002.p/100", ""); code != 200 {
			return fmt.Errorf("bundle 2 (100 entries): %d %s", code, body)
		}
		return nil
	})
	for b := 0; b < 2; b++ {
		code, hdr, body := get(t, fmt.Sprintf("%s/tile/entries/%03d", base, b), "")
		if code != 200 {
			t.Fatalf("bundle %d: %d %s", b, code, body)
		}
		if cc := hdr.Get("Cache-Control"); !strings.Contains(cc, "immutable") || !strings.Contains(cc, "max-age=31536000") {
			t.Fatalf("full bundle Cache-Control %q", cc)
		}
		got := splitBundle(t, []byte(body))
		if len(got) != 256 {
			t.Fatalf("bundle %d holds %d entries", b, len(got))
		}
		for j, e := range got {
			if e != leaves[b*256+j] {
				t.Fatalf("bundle %d entry %d = %q, want %q", b, j, e, leaves[b*256+j])
			}
		}
	}
	code, hdr, body := get(t, base+"/tile/entries/002.p/100", "")
	if code != 200 || len(splitBundle(t, []byte(body))) != 100 || hdr.Get("Cache-Control") != "public, max-age=10" {
		t.Fatalf("partial bundle: %d %q %q", code, hdr.Get("Cache-Control"), body[:min(len(body), 80)])
	}
	if code, _, body := get(t, base+"/tile/entries/002.p/188", ""); code != 404 || !strings.Contains(body, "leaf 650") || !strings.Contains(body, "hash only") {
		t.Fatalf("bundle with a hash-only leaf: %d %s", code, body)
	}
	// The level-0 tiles are the leaf hashes; a tile past the tree does not exist yet.
	code, hdr, body = get(t, base+"/tile/0/001", "")
	if code != 200 || len(body) != 256*32 || !strings.Contains(hdr.Get("Cache-Control"), "immutable") {
		t.Fatalf("tile 0/001: %d %d bytes %q", code, len(body), hdr.Get("Cache-Control"))
	}
	if want := tlog.RecordHash([]byte(leaves[256])); body[:32] != string(want[:]) {
		t.Fatal("tile 0/001 does not start with leaf 256's hash")
	}
	for _, p := range []string{"0/003", "0/002.p/189", "1/000", "entries/003"} {
		if code, _, body := get(t, base+"/tile/"+p, ""); code != 404 {
			t.Fatalf("tile/%s past the tree: %d %s", p, code, body)
		}
	}
	for _, p := range []string{"0/1", "0/x000/001", "00/000", "9/000", "0/000.p/256", "0/000.p/0", "entries/000.p/"} {
		if code, _, body := get(t, base+"/tile/"+p, ""); code != 404 || !strings.Contains(body, "C2SP tile path") {
			t.Fatalf("malformed tile/%s: %d %s", p, code, body)
		}
	}
}

// rootAt is the log's root at size, from /root.
func rootAt(t *testing.T, base string, size int64) tlog.Hash {
	t.Helper()
	code, _, body := get(t, fmt.Sprintf("%s/root?size=%d", base, size), "")
	var r struct{ RootHash string }
	if code != 200 || json.Unmarshal([]byte(body), &r) != nil {
		t.Fatalf("/root: %d %s", code, body)
	}
	h, err := merkle.ParseHash(r.RootHash)
	if err != nil {
		t.Fatal(err)
	}
	return tlog.Hash(h)
}

func splitBundle(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	for len(b) > 0 {
		if len(b) < 2 {
			t.Fatalf("bundle has a torn length")
		}
		n := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+n {
			t.Fatalf("bundle entry of %d bytes, %d left", n, len(b)-2)
		}
		out = append(out, string(b[2:2+n]))
		b = b[2+n:]
	}
	return out
}

// TestBundlesNeedTheTenantsToken: public hashes, private contents. A tenant with
// tokens keeps its entry bundles (leaves) to its token holders, as /leaves does: no
// token, a wrong one and another tenant's are 401; its own token reads them, privately
// cached. Its hash tiles, level 0 included, and its checkpoint need no token and may
// be cached publicly.
func TestBundlesNeedTheTenantsToken(t *testing.T) {
	l := logtest.Start(t, logtest.Options{Tenants: []logtest.Tenant{{ID: "default", Token: "tok-d"}, {ID: "acme", Token: "tok-a"}}})
	l.Append(t, "acme", "one")
	p := "/tile/entries/000.p/1"
	for _, tok := range []string{"", "wrong", "tok-d"} {
		if code, _, body := get(t, l.Base("acme")+p, tok); code != 401 {
			t.Fatalf("%s with token %q: %d %s", p, tok, code, body)
		}
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		code, hdr, body := get(t, l.Base("acme")+p, "tok-a")
		if code != 200 || !strings.HasPrefix(hdr.Get("Cache-Control"), "private") {
			return fmt.Errorf("%s with the tenant's token: %d %q %s", p, code, hdr.Get("Cache-Control"), body)
		}
		return nil
	})
	code, hdr, body := get(t, l.Base("acme")+"/tile/0/000.p/1", "")
	if code != 200 || len(body) != 32 || !strings.HasPrefix(hdr.Get("Cache-Control"), "public") {
		t.Fatalf("hash tile without a token: %d %q %d bytes", code, hdr.Get("Cache-Control"), len(body))
	}
}

// TestAddRoute: POST /add takes the entry as the body and answers the decimal index
// (what Tessera's hammer reads) and then the proof /append answers; a retry gets the
// same index; bad bodies get clear errors; a tenant's token is required.
func TestAddRoute(t *testing.T) {
	l := logtest.Start(t, logtest.Options{Tenants: []logtest.Tenant{{ID: "default", Token: "tok"}, {ID: "open"}}})
	for i := 0; i < 3; i++ {
		code, hdr, body := do(t, "POST", l.Base("open")+"/add", "", fmt.Sprintf("hammer leaf %d", i))
		lines := strings.Split(body, "\n")
		if code != 200 || lines[0] != strconv.Itoa(i) || hdr.Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Fatalf("add %d: %d %q", i, code, body)
		}
		var p receipt.Proof
		if err := json.Unmarshal([]byte(lines[1]), &p); err != nil || p.Inclusion.LeafIndex != uint64(i) || p.TreeHead == nil {
			t.Fatalf("add %d: the second line is not the proof: %v %q", i, err, lines[1])
		}
		if _, err := p.TreeHead.Verify([]signer.PublicKey{l.Key.Public()}); err != nil {
			t.Fatalf("add %d: the head does not verify with the log key: %v", i, err)
		}
	}
	if code, _, body := do(t, "POST", l.Base("open")+"/add", "", "hammer leaf 1"); code != 200 || !strings.HasPrefix(body, "1\n") {
		t.Fatalf("retry of leaf 1: %d %q", code, body)
	}
	for _, c := range []struct {
		body string
		code int
		msg  string
	}{
		{"", 400, "empty entry"},
		{"\xff\xfe", 400, "UTF-8"},
		{strings.Repeat("a", 65536), 413, "entry over 65535 bytes"},
	} {
		if code, _, body := do(t, "POST", l.Base("open")+"/add", "", c.body); code != c.code || !strings.Contains(body, c.msg) {
			t.Fatalf("add of %d bytes: %d %s", len(c.body), code, body)
		}
	}
	for _, tok := range []string{"", "wrong"} {
		if code, _, _ := do(t, "POST", l.URL+"/add", tok, "x"); code != 401 {
			t.Fatalf("add with token %q: %d", tok, code)
		}
	}
	if code, _, body := do(t, "POST", l.URL+"/add", "tok", "x"); code != 200 || !strings.HasPrefix(body, "0\n") {
		t.Fatalf("add with the token: %d %s", code, body)
	}
}
