package logserver

import (
	"errors"
	"io/fs"
	"net/http"
	"strconv"

	"svc.dev/svc/httpjson"
	"svc.dev/svc/merkle"
)

// The C2SP tlog-tiles read path (https://c2sp.org/tlog-tiles), per tenant beside the
// SPEC routes: /tile/<L>/<N>[.p/<W>] and /tile/entries/<N>[.p/<W>] at the root for the
// default tenant and under /t/<tenant>/ for the others, with GET /checkpoint (the
// signed note) as the C2SP checkpoint. A tenant is one C2SP log whose origin is its
// checkpoint's origin line.
//
// Hash tiles are read from the sequencer's tree store (one ReadAt of a level file),
// never recomputed; entry bundles come from an EntryBundles projection. A full tile or
// bundle never changes and is served with a year-long immutable cache lifetime; a
// partial one is served for TileCachePartial seconds.
//
// Public hashes, private contents: hash tiles (every level, level 0 included) need no
// credential on any tenant, as the checkpoint does not: they are hashes the public
// /consistency and /root already give away, in another form, and any C2SP client,
// monitor or witness must read them without a secret. Entry bundles are the tenant's
// leaves, which /leaves guards: a tenant with tokens serves them to bearers of its
// tokens only, unless it opted its log public (Tenant.Public); a tenant without tokens
// is an open log, readable by anyone.

// EntryBundles serves a tenant's C2SP entry bundles.
type EntryBundles interface {
	// Bundle returns the body of bundle index with width entries (1..256). An error
	// wrapping fs.ErrNotExist means the log holds no such bundle (not yet, or not in
	// C2SP form) and says why; any other error is a failure of the store.
	Bundle(index uint64, width int) ([]byte, error)
}

// Cache lifetimes of tiles, in seconds.
const (
	TileCacheFull    = 365 * 24 * 3600
	TileCachePartial = 10
)

// tileRoutes registers the tile routes; called from New.
//
// Hash tiles are public (they start a tenant like /head does); entry bundles need the
// tenant's token, checked before the tenant is looked up or started (Config.Authorize).
// A tenant that opted its log public (Config.PublicEntries) serves its bundles like
// its hash tiles.
func (s *Server) tileRoutes() {
	public, private := s.tenantRoute(s.tile, false), s.tenantRoute(s.tile, true)
	h := func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("tenant")
		if id == "" {
			id = DefaultTenant
		}
		open := s.cfg.PublicEntries != nil && s.cfg.PublicEntries(id)
		if p, err := ParseTilePath(r.PathValue("path")); err == nil && p.Entries && !open {
			private(w, r)
			return
		}
		public(w, r)
	}
	s.mux.HandleFunc("GET /tile/{path...}", h)
	s.mux.HandleFunc("GET /t/{tenant}/tile/{path...}", h)
}

func (s *Server) tile(w http.ResponseWriter, r *http.Request, t *Tenant) {
	p, err := ParseTilePath(r.PathValue("path"))
	private := p.Entries && t.privateEntries()
	if private && !s.authorized(t, r, bearer(r)) {
		httpjson.WriteError(w, http.StatusUnauthorized, "unauthorized")
		return
	}
	if err != nil {
		httpjson.WriteError(w, http.StatusNotFound, err.Error())
		return
	}
	if !p.Entries {
		if err := ServeHashTile(w, p, t.Tree); err != nil {
			s.unavailable(w, r, err)
		}
		return
	}
	if t.Entries == nil {
		httpjson.WriteError(w, http.StatusNotFound, "this log serves no entry bundles")
		return
	}
	body, err := t.Entries.Bundle(p.Index, p.Width)
	if errors.Is(err, fs.ErrNotExist) {
		httpjson.WriteError(w, http.StatusNotFound, "tile/"+p.String()+": "+err.Error())
		return
	}
	if err != nil {
		s.unavailable(w, r, err)
		return
	}
	writeTile(w, p, body, private)
}

// ServeHashTile answers the hash tile p of the log whose hashes tree holds: read from
// its store (never recomputed), 404 when the tree does not reach it yet, with the
// public cache lifetimes of a tile. It is the one server of hash tiles: a tenant's
// /tile/ routes and the log of logs' (internal/logservice) both answer through it.
// It returns only a failure of the store, which it has not answered.
func ServeHashTile(w http.ResponseWriter, p TilePath, tree *merkle.Tree) error {
	if p.Entries {
		httpjson.WriteError(w, http.StatusNotFound, "tile/"+p.String()+": not a hash tile")
		return nil
	}
	body, err := tree.TileHashes(p.Level, p.Index, p.Width)
	if errors.Is(err, merkle.ErrIndexOutOfRange) {
		httpjson.WriteError(w, http.StatusNotFound, "tile/"+p.String()+" does not exist yet: "+err.Error())
		return nil
	}
	if err != nil {
		return err
	}
	writeTile(w, p, body, false)
	return nil
}

// writeTile writes a tile's body with its cache lifetime: a year and immutable when
// full, TileCachePartial seconds when partial; private (no shared cache) for a
// tenant's private entry bundles.
func writeTile(w http.ResponseWriter, p TilePath, body []byte, private bool) {
	w.Header().Set("Content-Type", "application/octet-stream")
	scope := "public" // shared caches may keep hashes and an open log's bundles
	if private {
		scope = "private"
	}
	if p.Partial() {
		w.Header().Set("Cache-Control", scope+", max-age="+strconv.Itoa(TileCachePartial))
	} else {
		w.Header().Set("Cache-Control", scope+", max-age="+strconv.Itoa(TileCacheFull)+", immutable")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// privateEntries says whether t's entry bundles need one of its tokens: it has tokens
// and did not opt its log public.
func (t *Tenant) privateEntries() bool {
	return t.tokenRequired() && (t.Public == nil || !t.Public())
}
