package fsutil

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ReadJSON decodes the JSON record at path into v. A missing file is not
// an error: found is false and v is untouched, because every record the
// agent keeps (repairs, sides, masked units, tracked paths) means "none
// yet" when absent. A record that does not decode names its file.
func ReadJSON(path string, v any) (found bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return true, fmt.Errorf("%s: %w", path, err)
	}
	return true, nil
}

// WriteJSON writes v to path as indented JSON ending in a newline, mode
// 0600 and atomically (WriteFile): the records hold host state the agent
// acts on after a crash, so a reader sees the old record or the new one.
func WriteJSON(path string, v any) (changed bool, err error) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	return WriteFile(path, append(data, '\n'), 0o600)
}
