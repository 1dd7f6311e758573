package projections

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"

	"svc.dev/svc/receipt"
)

// loadState reads a projection's JSON state; a missing file leaves v as it is.
func loadState(path string, v any) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// saveState writes a projection's JSON state atomically.
func saveState(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return receipt.WriteFileAtomic(path, data, 0o644)
}
