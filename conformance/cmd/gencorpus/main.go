// Command gencorpus writes a generated audit corpus (vectorgen.WriteCorpus): receipts of
// two gateways and an SDK on one hosted log, with tampered ones of every typical cause,
// the keys, a log copy and a witnessed checkpoint. It prints where each part is and the
// svc verify command line that checks the corpus.
//
//	go run ./conformance/cmd/gencorpus -n 100000 -out /tmp/corpus
package main

import (
	"flag"
	"fmt"
	"os"

	"svc.dev/svc/conformance/vectorgen"
)

func main() {
	n := flag.Int("n", 100000, "number of receipt files to write")
	out := flag.String("out", "", "directory to write the corpus into (required; created)")
	every := flag.Int("head-every", 64, "leaves between two signed heads of the hosted log")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "gencorpus: -out is required")
		os.Exit(2)
	}
	c, err := vectorgen.WriteCorpus(*out, vectorgen.CorpusOptions{Receipts: *n, HeadEvery: *every})
	if err != nil {
		fmt.Fprintln(os.Stderr, "gencorpus:", err)
		os.Exit(1)
	}
	k := func(n string) string { return c.Keys[n] }
	fmt.Printf("%d receipts in %s (%d tampered, %d in a fork of the log)\n", c.Receipts, c.Bundles, len(c.Tampered), len(c.Forked))
	fmt.Printf("svc verify %s --issuer-key %s --issuer-key %s --issuer-key %s --principal-key %s --log-key %s --log-id %s\n",
		c.Bundles, k("gateway"), k("gateway-2"), k("sdk"), k("alice"), k("log"), c.LogID)
	fmt.Printf("  with the checkpoint: --checkpoint %s --witness-key %s --log %s\n", c.Checkpoint, k("witness"), c.LogFile)
}
