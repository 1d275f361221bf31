package aclhost

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Path returns the build machine's path for p inside the running host
// (through /proc/<leader>/root, so it sees the host's own mounts: /run,
// /tmp and the read-only /usr). Use it to read; put files in with CopyIn.
func (h *Host) Path(p string) string {
	return filepath.Join(fmt.Sprintf("/proc/%d/root", h.leader), filepath.Clean("/"+p))
}

// checkTarget refuses targets under /usr: it is read-only on ACL hosts, and
// a test that planted files there would be testing a host nobody has.
func checkTarget(dst string) (string, error) {
	if !path.IsAbs(dst) {
		return "", fmt.Errorf("aclhost: copy target %q is not absolute", dst)
	}
	clean := path.Clean(dst)
	if clean == "/usr" || strings.HasPrefix(clean, "/usr/") {
		return "", fmt.Errorf("aclhost: copy target %s is under /usr: /usr is read-only on ACL hosts; tests must not put files there (use /opt, /etc or /var)", dst)
	}
	if clean == "/" {
		return "", errors.New("aclhost: copy target is /")
	}
	return clean, nil
}

// CopyIn copies the file or directory tree src from the build machine to
// dst inside the host, writing from inside (so the host's own mounts and
// permissions apply). A file gets mode; a directory keeps its entries'
// modes and dst gets mode if it is non-zero. Parents are created.
func (h *Host) CopyIn(src, dst string, mode os.FileMode) error {
	dst, err := checkTarget(dst)
	if err != nil {
		return err
	}
	st, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("aclhost: copy in: %w", err)
	}
	if !st.IsDir() {
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		return h.writeInside(f, dst, mode)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, src)) }()
	script := `mkdir -p "$1" && tar -x --no-same-owner -C "$1" -f -`
	if mode != 0 {
		script += fmt.Sprintf(` && chmod %o "$1"`, mode.Perm())
	}
	if _, _, err := h.run(context.Background(), pr, "/bin/sh", "-ec", script, "sh", dst); err != nil {
		pr.CloseWithError(err)
		return fmt.Errorf("aclhost: copy %s to %s: %w", src, dst, err)
	}
	return nil
}

// WriteFile writes data to dst inside the host (same rules as CopyIn).
func (h *Host) WriteFile(dst string, data []byte, mode os.FileMode) error {
	dst, err := checkTarget(dst)
	if err != nil {
		return err
	}
	return h.writeInside(bytes.NewReader(data), dst, mode)
}

func (h *Host) writeInside(r io.Reader, dst string, mode os.FileMode) error {
	// Write next to the target and rename, so units and scripts are never
	// seen half-written by the host's systemd.
	script := fmt.Sprintf(`d=$(dirname "$1"); mkdir -p "$d"; t="$1.aclhost-tmp"; cat >"$t"; chmod %o "$t"; mv -f "$t" "$1"`, mode.Perm())
	if _, _, err := h.run(context.Background(), r, "/bin/sh", "-ec", script, "sh", dst); err != nil {
		return fmt.Errorf("aclhost: write %s: %w", dst, err)
	}
	return nil
}

func writeTar(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "root", "root"
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, f)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
