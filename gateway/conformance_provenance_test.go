package gateway_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

// everythingServerSHA256 is the SHA-256 of examples/servers/typescript/everything-server.ts
// in github.com/modelcontextprotocol/conformance at tag v0.1.16 (commit
// 21a9a2febd7100d7c17ac1021ee7f2ed9f66a1e0), as that repository serves it.
const everythingServerSHA256 = "1b81d249da3ac9261980fc76401585446325f5a77e393fd87646f1d8bbfea680"

// TestEverythingServerIsTheUpstreamFile holds e2e/conformance/everything-server.ts to
// its provenance header: below the header the file is the conformance repository's
// reference server unchanged, so the suite measures the gateway against the server
// the suite was written for, not against a copy bent to pass. The file is the suite's
// counterpart, kept in the repository because no npm package ships it and CI reaches
// only the npm registry; the header is the comment block after the shebang line.
func TestEverythingServerIsTheUpstreamFile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "e2e", "conformance", "everything-server.ts"))
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	if len(lines) < 8 || !bytes.HasPrefix(lines[1], []byte("// Copied unchanged below this header from github.com/modelcontextprotocol/conformance")) {
		t.Fatalf("everything-server.ts does not open with its provenance header (shebang, then \"// Copied unchanged below this header from …\")")
	}
	body := lines[0]
	i := 1
	for i < len(lines) && bytes.HasPrefix(lines[i], []byte("//")) {
		i++
	}
	for _, l := range lines[i:] {
		body = append(body[:len(body):len(body)], l...)
	}
	sum := sha256.Sum256(body)
	if got := hex.EncodeToString(sum[:]); got != everythingServerSHA256 {
		t.Fatalf("everything-server.ts below its header has SHA-256 %s, want %s (the file at the conformance repository's tag v0.1.16): restore it, or when moving to a new tag copy the file unchanged and update the header and this digest", got, everythingServerSHA256)
	}
}
