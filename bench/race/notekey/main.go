// Command notekey prints a fresh Ed25519 signed-note key pair for the origin given as
// its argument: the signer key on the first line, the verifier key on the second. The
// race script (bench/race/race.sh) gives it to a Tessera log (LOG_PRIVATE_KEY) when
// one is raced beside ours.
package main

import (
	"crypto/rand"
	"fmt"
	"os"

	"golang.org/x/mod/sumdb/note"
)

func main() {
	if len(os.Args) != 2 || os.Args[1] == "" || os.Args[1] == "-h" || os.Args[1] == "--help" {
		fmt.Fprintln(os.Stderr, "usage: notekey <origin>   (prints the signer key, then the verifier key)")
		os.Exit(2)
	}
	skey, vkey, err := note.GenerateKey(rand.Reader, os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "notekey:", err)
		os.Exit(1)
	}
	fmt.Println(skey)
	fmt.Println(vkey)
}
