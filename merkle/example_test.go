package merkle_test

import (
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"svc.dev/svc/merkle"
)

func ExampleTree_InclusionProof() {
	tree, err := merkle.NewTree(merkle.NewMemoryStore())
	if err != nil {
		log.Fatal(err)
	}
	for _, leaf := range []string{"a", "b", "c", "d", "e"} {
		if _, err := tree.Append(merkle.LeafHash([]byte(leaf))); err != nil {
			log.Fatal(err)
		}
	}
	// Prove that "c" is leaf 2 of the tree of size 5.
	proof, err := tree.InclusionProof(2, 5)
	if err != nil {
		log.Fatal(err)
	}
	root := tree.Root()
	fmt.Println("root:", root)
	for _, h := range proof {
		fmt.Println("proof:", h)
	}
	// A verifier needs only the leaf, the proof and a trusted root.
	err = merkle.VerifyInclusion(2, 5, merkle.LeafHash([]byte("c")), proof, root)
	fmt.Println("verified:", err == nil)
	err = merkle.VerifyInclusion(2, 5, merkle.LeafHash([]byte("x")), proof, root)
	fmt.Println("other leaf rejected:", errors.Is(err, merkle.ErrInvalidProof))
	// Output:
	// root: fe14a5426fbd70c0fa73f52342afed0da0bd23c4838662ccf6b88a3070ead97b
	// proof: d070dc5b8da9aea7dc0f5ad4c29d89965200059c9a0ceca3abd5da2492dcb71d
	// proof: b137985ff484fb600db93107c77b0365c80d78f5b429ded0fd97361d077999eb
	// proof: 2824a7ccda2caa720c85c9fba1e8b5b735eecfdb03878e4f8dfe6c3625030bc4
	// verified: true
	// other leaf rejected: true
}

func ExampleVerifyConsistency() {
	tree, _ := merkle.NewTree(merkle.NewMemoryStore())
	var roots []merkle.Hash
	for i := range 7 {
		tree.Append(merkle.LeafHash([]byte{byte(i)}))
		roots = append(roots, tree.Root())
	}
	// The tree of 3 leaves is a prefix of the tree of 7.
	proof, _ := tree.ConsistencyProof(3, 7)
	fmt.Println(len(proof), "hashes:", merkle.VerifyConsistency(3, 7, roots[2], roots[6], proof))
	// Output:
	// 4 hashes: <nil>
}

func ExampleLogFile() {
	dir, err := os.MkdirTemp("", "merkle-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "log.jsonl")

	l, err := merkle.OpenLogFile(path, merkle.LogFileOptions{})
	if err != nil {
		log.Fatal(err)
	}
	// A leaf (the canonical JSON of a receipt envelope), a leaf appended by
	// its hash, and a batch written with one fsync.
	l.AppendLeaf(`{"payload":"e30=","payloadType":"application/vnd.in-toto+json","signatures":[]}`)
	l.AppendHash(merkle.LeafHash([]byte("a receipt kept elsewhere")))
	first, _ := l.AppendBatch([]merkle.Entry{
		{Kind: merkle.LineLeaf, Leaf: "third"},
		{Kind: merkle.LineLeaf, Leaf: "fourth"},
	})
	fmt.Println("size:", l.Size(), "batch at:", first)
	root := l.Tree().Root()
	if i, ok := l.IndexOf(merkle.LeafHash([]byte("third"))); ok {
		e, _ := l.Entry(i)
		fmt.Printf("entry %d: %s %q\n", i, e.Kind, e.Leaf)
	}
	l.Close()

	// Retention: prune the first leaf. Roots and proofs do not change.
	n, _ := merkle.PruneLogFile(path, func(index uint64, leaf string) bool { return index == 0 })
	fmt.Println("pruned:", n)

	data, _ := os.ReadFile(path)
	fmt.Print(string(data))

	l, err = merkle.OpenLogFile(path, merkle.LogFileOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	fmt.Println("same root:", l.Tree().Root() == root)
	// Output:
	// size: 4 batch at: 2
	// entry 2: leaf "third"
	// pruned: 1
	// {"pruned":"eeb622211fbdea04f09551ca6bc378feb6e80ad099adeaedce2778a428b6eba0"}
	// {"hash":"54eefc84c8449449e16a5013715133c52e5af4c18774c767ea866e3e794aa393"}
	// "third"
	// "fourth"
	// same root: true
}
