package image

import (
	"bytes"
	"crypto/md5" //nolint:gosec // dpkg's conffile records are MD5 by format
	"encoding/hex"
	"io"
	"sort"
	"strings"
)

// dpkgDir is dpkg's database in the image.
const dpkgDir = "/var/lib/dpkg"

// dpkgDatabase writes the database dpkg would have after installing the
// packages: status with every package "install ok installed" (so dpkg -l
// and dpkg -S work in the machine), and per package its file list,
// md5sums and conffiles. Maintainer scripts are not kept: running them
// later would do what the builder already did, differently.
func (b *builder) dpkgDatabase() error {
	if len(b.debs) == 0 {
		return nil
	}
	for _, d := range []string{dpkgDir, dpkgDir + "/info", dpkgDir + "/updates", dpkgDir + "/triggers", dpkgDir + "/alternatives", dpkgDir + "/parts"} {
		b.dir(d, 0o755)
	}
	for _, f := range []string{"available", "diversions", "statoverride"} {
		b.file(dpkgDir+"/"+f, nil, 0o644, 0)
	}
	var status bytes.Buffer
	debs := append([]*unpacked{}, b.debs...)
	sort.Slice(debs, func(i, j int) bool { return debs[i].pkg.Name < debs[j].pkg.Name })
	for _, u := range debs {
		p := u.control.Paragraph
		p.Set("Status", "install ok installed", "Package")
		if cf := b.conffiles(u); cf != "" {
			p.Set("Conffiles", cf, "")
		}
		if _, err := p.WriteTo(&status); err != nil {
			return err
		}
		status.WriteByte('\n')
		info := dpkgDir + "/info/" + infoName(u)
		var list bytes.Buffer
		list.WriteString("/.\n")
		for _, e := range u.entries {
			list.WriteString(e.orig + "\n")
		}
		b.file(info+".list", list.Bytes(), 0o644, 0)
		for _, f := range []string{"md5sums", "conffiles", "shlibs", "symbols", "triggers"} {
			if data, ok := u.control.Files[f]; ok {
				b.file(info+"."+f, data, 0o644, 0)
			}
		}
	}
	b.file(dpkgDir+"/status", status.Bytes(), 0o644, 0)
	return nil
}

// infoName is the package's name in dpkg's info dir: name:arch for
// Multi-Arch: same packages.
func infoName(u *unpacked) string {
	if u.control.Paragraph.Get("Multi-Arch") == "same" {
		return u.pkg.Name + ":" + u.pkg.Architecture
	}
	return u.pkg.Name
}

// conffiles renders the status file's Conffiles field: each conffile
// with the MD5 of the content the package shipped.
func (b *builder) conffiles(u *unpacked) string {
	cf := strings.Fields(string(u.control.Files["conffiles"]))
	if len(cf) == 0 {
		return ""
	}
	var out strings.Builder
	for _, c := range cf {
		if !strings.HasPrefix(c, "/") {
			continue // "remove-on-upgrade" and other flags
		}
		sum := "newconffile"
		for _, e := range u.entries {
			if e.orig == c && e.node.Content != nil {
				if s, err := md5Of(e.node.Content); err == nil {
					sum = s
				}
				break
			}
		}
		out.WriteString("\n " + c + " " + sum)
	}
	return out.String()
}

func md5Of(c Content) (string, error) {
	rc, err := c.Open()
	if err != nil {
		return "", err
	}
	defer rc.Close()
	h := md5.New() //nolint:gosec // format
	if _, err := io.Copy(h, rc); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
