// Package swap owns keeping swap off across reboots, and undoing exactly
// that: the host's /etc/fstab lines that turn swap on at boot, commented
// with a marker that reset removes again, the record of the swap units
// start masked, which reset unmasks, and the swap unit files an admin
// wrote into /etc/systemd/system, which mask cannot replace: moved aside
// (recorded) for the mask, and put back by reset. swapoff itself is the
// disable-swap task's; the kubelet does not run with swap on here.
package swap

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/Azure/aks-flex-node/internal/fsutil"
)

// Fstab is the host's mount table, relative to the root.
const Fstab = "/etc/fstab"

// Marker starts each fstab line start commented; reset uncomments the
// lines that start with it, and only those.
const Marker = "#aks-flex-node:swap-off# "

// MaskedFile, in the state dir, lists the swap units start masked.
const MaskedFile = "swap-masked.json"

// MovedFile, in the state dir, lists the swap units whose unit file start
// moved aside (MoveAside) to mask them.
const MovedFile = "swap-moved.json"

// asideSuffix names a unit file moved aside; the leading dot hides it
// from systemd, which loads no unit from a dot file.
const asideSuffix = ".aks-flex-node-swap-off"

// CommentFstab comments every swap line of root's fstab that would turn
// swap on at boot (type swap, not noauto), atomically and keeping the
// file's mode; it returns the lines it commented. A missing fstab is no
// swap.
func CommentFstab(root string) (commented []string, err error) {
	p := filepath.Join(root, Fstab)
	data, mode, err := read(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	lines := strings.SplitAfter(string(data), "\n")
	for i, l := range lines {
		if activeSwap(l) {
			commented = append(commented, strings.TrimRight(l, "\n"))
			lines[i] = Marker + l
		}
	}
	if len(commented) == 0 {
		return nil, nil
	}
	if _, err := fsutil.WriteFile(p, []byte(strings.Join(lines, "")), mode); err != nil {
		return nil, fmt.Errorf("comment swap in %s: %w", p, err)
	}
	return commented, nil
}

// RestoreFstab uncomments the lines CommentFstab commented, atomically,
// and returns how many.
func RestoreFstab(root string) (int, error) {
	p := filepath.Join(root, Fstab)
	data, mode, err := read(p)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	lines := strings.SplitAfter(string(data), "\n")
	n := 0
	for i, l := range lines {
		if rest, ok := strings.CutPrefix(l, Marker); ok {
			lines[i] = rest
			n++
		}
	}
	if n == 0 {
		return 0, nil
	}
	if _, err := fsutil.WriteFile(p, []byte(strings.Join(lines, "")), mode); err != nil {
		return 0, fmt.Errorf("restore swap in %s: %w", p, err)
	}
	return n, nil
}

func read(p string) ([]byte, fs.FileMode, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, 0, err
	}
	data, err := fsutil.ReadRegular(p, 1<<20)
	return data, fi.Mode().Perm(), err
}

// activeSwap says whether fstab line l turns swap on at boot.
func activeSwap(l string) bool {
	f := strings.Fields(l)
	if len(f) < 3 || strings.HasPrefix(f[0], "#") || f[2] != "swap" {
		return false
	}
	return len(f) < 4 || !slices.Contains(strings.Split(f[3], ","), "noauto")
}

// Units are the swap units in `systemctl list-units --type=swap --all
// --plain --no-legend --full` output (its second column the load state)
// or in `systemctl list-unit-files` output with those flags (its second
// column the file's state) that are not masked yet.
func Units(listUnits []byte) []string {
	var units []string
	for _, l := range strings.Split(string(listUnits), "\n") {
		f := strings.Fields(strings.TrimLeft(l, "●* "))
		if len(f) < 2 || !strings.HasSuffix(f[0], ".swap") || f[1] == "masked" {
			continue
		}
		units = append(units, f[0])
	}
	return units
}

// RecordMasked adds units to the record in stateDir, before they are
// masked: a crash in between leaves a unit recorded that reset unmasks
// (a no-op when it is not masked), never one masked and forgotten.
func RecordMasked(stateDir string, units []string) error {
	return record(stateDir, MaskedFile, units)
}

// Masked is the record of the units start masked.
func Masked(stateDir string) ([]string, error) { return recorded(stateDir, MaskedFile) }

// Moved is the record of the units whose unit file start moved aside.
func Moved(stateDir string) ([]string, error) { return recorded(stateDir, MovedFile) }

func record(stateDir, file string, units []string) error {
	have, err := recorded(stateDir, file)
	if err != nil {
		return err
	}
	for _, u := range units {
		if !slices.Contains(have, u) {
			have = append(have, u)
		}
	}
	_, err = fsutil.WriteJSON(filepath.Join(stateDir, file), have)
	return err
}

func recorded(stateDir, file string) ([]string, error) {
	var units []string
	if _, err := fsutil.ReadJSON(filepath.Join(stateDir, file), &units); err != nil {
		return nil, err
	}
	return units, nil
}

// MoveAside makes unit maskable: `systemctl mask` links the unit's name
// in unitDir (the host's /etc/systemd/system, as this process opens it)
// to /dev/null, and refuses when an admin's unit file is there under that
// name. Such a file is moved aside in the same directory (a rename, so
// it is never lost), recorded in stateDir first: a crash in between
// leaves a record PutBack skips, never a file moved and forgotten. It
// says whether it moved one; a link there (an enablement, or a mask) or
// no file is left alone.
func MoveAside(stateDir, unitDir, unit string) (bool, error) {
	p := filepath.Join(unitDir, unit)
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) || err == nil && !fi.Mode().IsRegular() {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := record(stateDir, MovedFile, []string{unit}); err != nil {
		return false, err
	}
	if err := os.Rename(p, asidePath(unitDir, unit)); err != nil {
		return false, fmt.Errorf("move %s aside: %w", p, err)
	}
	return true, nil
}

// PutBack moves every unit file MoveAside moved back under its name,
// replacing the mask link there in one rename, and returns the units
// put back. A unit recorded but not moved (a crash in between) is
// skipped; one whose name holds a regular file again is an error, never
// overwritten.
func PutBack(stateDir, unitDir string) ([]string, error) {
	units, err := Moved(stateDir)
	if err != nil {
		return nil, err
	}
	var back []string
	for _, u := range units {
		aside, p := asidePath(unitDir, u), filepath.Join(unitDir, u)
		if _, err := os.Lstat(aside); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			return back, fmt.Errorf("cannot put %s back: %s is a file again", aside, p)
		}
		if err := os.Rename(aside, p); err != nil {
			return back, fmt.Errorf("put %s back: %w", p, err)
		}
		back = append(back, u)
	}
	return back, nil
}

func asidePath(unitDir, unit string) string {
	return filepath.Join(unitDir, "."+unit+asideSuffix)
}
