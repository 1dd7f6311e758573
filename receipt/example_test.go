package receipt_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// Sign a statement, send it as JSON, parse and verify it on the other side with
// the public key only.
func Example_signAndVerify() {
	key, err := signer.KeyFromSeed(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		panic(err)
	}
	env, err := receipt.SignJSON(receipt.PayloadInToto, map[string]any{"tool": "search", "_type": receipt.StatementType}, key)
	if err != nil {
		panic(err)
	}
	wire, _ := json.Marshal(env)

	got, err := receipt.ParseEnvelope(wire)
	if err != nil {
		panic(err)
	}
	signedBy, err := got.Verify([]signer.PublicKey{key.Public()})
	fmt.Println("verified:", err == nil, "by the issuer key:", signedBy.KeyID == key.KeyID())
	fmt.Printf("payload: %s\n", got.Payload)

	got.Payload = []byte(`{"_type":"https://in-toto.io/Statement/v1","tool":"delete"}`)
	_, err = got.Verify([]signer.PublicKey{key.Public()})
	fmt.Println("edited payload verifies:", !errors.Is(err, receipt.ErrNoTrustedSignature))
	// Output:
	// verified: true by the issuer key: true
	// payload: {"_type":"https://in-toto.io/Statement/v1","tool":"search"}
	// edited payload verifies: false
}
