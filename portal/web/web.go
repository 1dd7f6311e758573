// Package web holds the portal's browser front: static HTML, CSS and JavaScript embedded
// in the binary and served by package portal at the site root. It uses no front-end
// framework; the pages call the portal's JSON API (SPEC.md, "Portal").
package web

import (
	"embed"
	"io/fs"
)

//go:embed assets
var assets embed.FS

// FS is the tree served at the portal's root: index.html and what it loads.
var FS fs.FS = mustSub(assets, "assets")

func mustSub(f fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(f, dir)
	if err != nil {
		panic(err)
	}
	return sub
}
