package logserver

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"svc.dev/svc/merkle"
)

// TilePath is a parsed C2SP tlog-tiles resource path (what follows /tile/).
type TilePath struct {
	Entries bool   // an entry bundle (/tile/entries/...); else a hash tile
	Level   uint8  // the tile level of a hash tile (0..merkle.MaxTileLevel)
	Index   uint64 // the tile or bundle index N
	Width   int    // 1..256; 256 is a full tile
}

// Partial reports whether the path names a partial tile (.p/<W>).
func (p TilePath) Partial() bool { return p.Width < merkle.TileWidth }

// String is the canonical path, without the leading "tile/".
func (p TilePath) String() string {
	var b strings.Builder
	if p.Entries {
		b.WriteString("entries/")
	} else {
		b.WriteString(strconv.Itoa(int(p.Level)))
		b.WriteByte('/')
	}
	b.WriteString(EncodeTileIndex(p.Index))
	if p.Partial() {
		fmt.Fprintf(&b, ".p/%d", p.Width)
	}
	return b.String()
}

// EncodeTileIndex writes N as C2SP does: zero-padded 3-digit path elements, all
// but the last prefixed with x (1234067 is x001/x234/067).
func EncodeTileIndex(n uint64) string {
	groups := []string{fmt.Sprintf("%03d", n%1000)}
	for n /= 1000; n > 0; n /= 1000 {
		groups = append(groups, fmt.Sprintf("x%03d", n%1000))
	}
	for i, j := 0, len(groups)-1; i < j; i, j = i+1, j-1 {
		groups[i], groups[j] = groups[j], groups[i]
	}
	return strings.Join(groups, "/")
}

// ErrTilePath wraps every reason a tile path does not parse.
var ErrTilePath = errors.New("not a C2SP tile path")

// ParseTilePath parses "<L>/<N>[.p/<W>]" or "entries/<N>[.p/<W>]" (the part after
// /tile/), accepting only the canonical form: a decimal level without leading zeros,
// N in minimal 3-digit groups, and a partial width 1..255.
func ParseTilePath(s string) (TilePath, error) {
	var p TilePath
	if len(s) > 64 {
		return p, fmt.Errorf("%w: %d characters", ErrTilePath, len(s))
	}
	segs := strings.Split(s, "/")
	if len(segs) < 2 {
		return p, fmt.Errorf("%w: %q: want <level>/<N> or entries/<N>", ErrTilePath, s)
	}
	if segs[0] == "entries" {
		p.Entries = true
	} else {
		l, err := decimal(segs[0])
		if err != nil || l > merkle.MaxTileLevel {
			return p, fmt.Errorf("%w: level %q: want 0..%d", ErrTilePath, segs[0], merkle.MaxTileLevel)
		}
		p.Level = uint8(l)
	}
	segs = segs[1:]
	p.Width = merkle.TileWidth
	if n := len(segs); n >= 2 && strings.HasSuffix(segs[n-2], ".p") {
		w, err := decimal(segs[n-1])
		if err != nil || w < 1 || w >= merkle.TileWidth {
			return p, fmt.Errorf("%w: partial width %q: want 1..%d", ErrTilePath, segs[n-1], merkle.TileWidth-1)
		}
		p.Width = int(w)
		segs[n-2] = strings.TrimSuffix(segs[n-2], ".p")
		segs = segs[:n-1]
	}
	if len(segs) > 7 {
		return p, fmt.Errorf("%w: index of %d groups", ErrTilePath, len(segs))
	}
	var n uint64
	for i, g := range segs {
		last := i == len(segs)-1
		if !last {
			var ok bool
			if g, ok = strings.CutPrefix(g, "x"); !ok {
				return p, fmt.Errorf("%w: index group %q: all but the last start with x", ErrTilePath, segs[i])
			}
		}
		if len(g) != 3 || g[0] < '0' || g[0] > '9' || g[1] < '0' || g[1] > '9' || g[2] < '0' || g[2] > '9' {
			return p, fmt.Errorf("%w: index group %q: want 3 digits", ErrTilePath, segs[i])
		}
		d := uint64(g[0]-'0')*100 + uint64(g[1]-'0')*10 + uint64(g[2]-'0')
		if i == 0 && d == 0 && !last {
			return p, fmt.Errorf("%w: index has a leading zero group", ErrTilePath)
		}
		if n > (1<<64-1-d)/1000 {
			return p, fmt.Errorf("%w: index overflows", ErrTilePath)
		}
		n = n*1000 + d
	}
	p.Index = n
	return p, nil
}

// decimal parses a non-negative decimal without sign or leading zeros.
func decimal(s string) (uint64, error) {
	if s == "" || (len(s) > 1 && s[0] == '0') || s[0] == '+' || s[0] == '-' {
		return 0, strconv.ErrSyntax
	}
	return strconv.ParseUint(s, 10, 64)
}
