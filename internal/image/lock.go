package image

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"time"
)

// LockFileName is the lock file `image build` writes next to the image.
const LockFileName = "worker.lock.json"

// LockSchemaVersion is the lock format this package reads and writes.
const LockSchemaVersion = 1

// Lock pins a build: the exact package files (by SHA-256) and the time
// every file in the image is stamped with. Building from the same lock
// (and spec) gives the same image, byte for byte. No mirror is recorded:
// the files are the same on every mirror of the archive.
type Lock struct {
	SchemaVersion int    `json:"schemaVersion"`
	Distribution  string `json:"distribution"`
	Suite         string `json:"suite"`
	Arch          string `json:"arch"`
	// SourceDate is the signed Release's Date: the mtime of every entry
	// and the image's creation time.
	SourceDate time.Time `json:"sourceDate"`
	// InReleaseSHA256 is the SHA-256 of the InRelease file the set was
	// resolved from.
	InReleaseSHA256 string           `json:"inReleaseSHA256"`
	Packages        []*LockedPackage `json:"packages"`
}

// LockedPackage is one package file of a build.
type LockedPackage struct {
	Name         string `json:"name"`
	Version      string `json:"version"`
	Architecture string `json:"architecture"`
	Source       string `json:"source,omitempty"`
	Component    string `json:"component,omitempty"`
	Filename     string `json:"filename"`
	SHA256       string `json:"sha256"`
	Size         int64  `json:"size"`
}

// LoadLock reads and checks a lock file.
func LoadLock(p string) (*Lock, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var l Lock
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s: %s", p, field, fmt.Sprintf(format, a...)))
	}
	if l.SchemaVersion != LockSchemaVersion {
		bad("schemaVersion", "%d is not supported (want %d)", l.SchemaVersion, LockSchemaVersion)
	}
	if !archRE().MatchString(l.Arch) {
		bad("arch", "%q is not amd64 or arm64", l.Arch)
	}
	if l.SourceDate.IsZero() {
		bad("sourceDate", "is required")
	}
	if len(l.Packages) == 0 {
		bad("packages", "is empty")
	}
	seen := map[string]bool{}
	for i, pk := range l.Packages {
		f := fmt.Sprintf("packages[%d]", i)
		if !pkgNameRE().MatchString(pk.Name) || seen[pk.Name] {
			bad(f+".name", "%q is not a package name, or is listed twice", pk.Name)
		}
		seen[pk.Name] = true
		if len(pk.SHA256) != 64 {
			bad(f+".sha256", "%q is not a SHA-256", pk.SHA256)
		}
		if pk.Filename == "" || pk.Version == "" || pk.Size <= 0 {
			bad(f, "needs filename, version and size")
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	l.sort()
	return &l, nil
}

func (l *Lock) sort() {
	sort.Slice(l.Packages, func(i, j int) bool { return l.Packages[i].Name < l.Packages[j].Name })
}

// Marshal is the lock's one rendering.
func (l *Lock) Marshal() ([]byte, error) {
	l.sort()
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// check refuses a lock that was made for another build.
func (l *Lock) check(s *Spec, arch string) error {
	switch {
	case l.Arch != arch:
		return fmt.Errorf("lock is for %s, the build for %s", l.Arch, arch)
	case l.Suite != s.Suite || l.Distribution != s.Distribution:
		return fmt.Errorf("lock is for %s %s, the spec says %s %s", l.Distribution, l.Suite, s.Distribution, s.Suite)
	}
	return nil
}
