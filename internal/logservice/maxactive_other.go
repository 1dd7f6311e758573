//go:build !unix

package logservice

// fileLimit is unknown here: defaultMaxActive counts DefaultMaxActive.
func fileLimit() int { return 0 }
