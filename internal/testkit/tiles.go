package testkit

import (
	"fmt"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/tlog"
)

// C2SPTiles reads a C2SP log's tiles over HTTP for golang.org/x/mod/sumdb/tlog, an
// implementation independent of ours (a tlog.TileReader): the path comes from tlog's
// own Tile.Path with its height element dropped (C2SP tlog-tiles has none) and its
// data tiles named entries, so the server's path encoding is checked too. Token is
// sent as a bearer token when set; the tiles are not saved.
type C2SPTiles struct {
	T     testing.TB
	Base  string // the log's prefix: its checkpoint is Base/checkpoint
	Token string
}

// Height is C2SP's tile height.
func (r C2SPTiles) Height() int { return 8 }

// ReadTiles GETs each tile; any answer but 200 is an error naming the path.
func (r C2SPTiles) ReadTiles(tiles []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(tiles))
	for i, tile := range tiles {
		path := strings.Replace(tile.Path(), "tile/8/", "tile/", 1)
		path = strings.Replace(path, "tile/data/", "tile/entries/", 1)
		code, _, body := Do(r.T, "GET", r.Base+"/"+path, r.Token, "")
		if code != 200 {
			return nil, fmt.Errorf("GET %s: %d %s", path, code, body)
		}
		out[i] = []byte(body)
	}
	return out, nil
}

// SaveTiles keeps nothing.
func (C2SPTiles) SaveTiles([]tlog.Tile, [][]byte) {}
