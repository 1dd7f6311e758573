// Package vectorgen writes the published conformance vectors (conformance/vectors):
// keys, log files, cases and the manifest, from fixed seeds and a fixed clock, so two
// runs write identical bytes. `go tool task vectors` runs it; TestVectorsUpToDate
// requires the committed copy to be exactly its output. Reading and checking the
// vectors is package conformance's (LoadManifest, RunCase).
package vectorgen
