// Command genvectors writes the conformance vectors. It is deterministic (fixed keys,
// clock and ids): run it into an empty directory and commit the result.
//
//	go run ./conformance/cmd/genvectors -out conformance/vectors
package main

import (
	"flag"
	"fmt"
	"os"

	"svc.dev/svc/conformance"
	"svc.dev/svc/conformance/vectorgen"
)

func main() {
	out := flag.String("out", "conformance/vectors", "empty or absent `directory` to write the vectors into")
	flag.Parse()
	if err := vectorgen.GenerateVectors(*out); err != nil {
		fmt.Fprintln(os.Stderr, "genvectors:", err)
		os.Exit(1)
	}
	m, err := conformance.LoadManifest(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "genvectors:", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %d cases to %s\n", len(m.Cases), *out)
}
