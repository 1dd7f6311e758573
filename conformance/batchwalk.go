package conformance

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// WalkBundles sends on out the path of every bundle that args name, then closes out:
// a file is sent as it is; a directory is walked recursively for *.json files, leaving
// out authorization files (*.authorization.json, which a pre-committing gateway writes
// next to its receipts and which are embedded in them), tool-definitions statements
// (*.tools.json, which a gateway writes next to its receipts) and hidden files and
// directories (temporary files of a writer); "-" reads one path a line from stdin
// (blank lines skipped). found is called for each path sent. It stops at the first
// path that cannot be read, returning its error.
func WalkBundles(ctx context.Context, args []string, stdin io.Reader, out chan<- string, found func()) error {
	defer close(out)
	send := func(p string) error {
		select {
		case out <- p:
			if found != nil {
				found()
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, a := range args {
		if a == "-" {
			if err := walkList(stdin, send); err != nil {
				return err
			}
			continue
		}
		st, err := os.Stat(a)
		if err != nil {
			return err
		}
		if !st.IsDir() {
			if err := send(a); err != nil {
				return err
			}
			continue
		}
		err = filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			name := d.Name()
			if p != a && strings.HasPrefix(name, ".") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.IsDir() || !strings.HasSuffix(name, ".json") || strings.HasSuffix(name, ".authorization.json") || strings.HasSuffix(name, ".tools.json") {
				return nil
			}
			return send(p)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func walkList(r io.Reader, send func(string) error) error {
	if r == nil {
		return fmt.Errorf("-: no standard input to read bundle paths from")
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		p := strings.TrimSpace(sc.Text())
		if p == "" {
			continue
		}
		if err := send(p); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading bundle paths from stdin: %w", err)
	}
	return nil
}
