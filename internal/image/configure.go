package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"path"
	"strings"
)

// Maintainer scripts are not run: they expect a chroot, root, and the
// build machine's tools. What a worker machine needs from them the
// builder does itself, as steps over the tree; systemd-sysusers and
// systemd-tmpfiles create the rest (system users, /var layout) at the
// machine's first boot, as they do on any systemd system.

// configureStep is one thing the builder does to the unpacked tree.
type configureStep struct {
	name string
	do   func(b *builder) error
}

// configureSteps run in this order after every package is unpacked.
var configureSteps = []configureStep{
	{"merged-usr", (*builder).mergedUsr},
	{"accounts", (*builder).accounts},
	{"alternatives", (*builder).alternatives},
	{"ca-certificates", (*builder).caCertificates},
	{"shells", (*builder).shells},
	{"machine-id", (*builder).machineID},
	{"hosts", (*builder).hosts},
	{"journal", (*builder).journal},
	{"systemd-units", (*builder).systemdUnits},
	{"dpkg-database", (*builder).dpkgDatabase},
}

func (b *builder) configure() error {
	for _, s := range configureSteps {
		if err := s.do(b); err != nil {
			return fmt.Errorf("configure %s: %w", s.name, err)
		}
	}
	return nil
}

// file puts a builder-made regular file into the tree.
func (b *builder) file(p string, data []byte, mode int64, gid int) {
	b.tree.Put(p, &Node{Type: tar.TypeReg, Mode: mode, GID: gid, Size: int64(len(data)), Content: Bytes(data)})
}

func (b *builder) symlink(p, target string) {
	b.tree.Put(p, &Node{Type: tar.TypeSymlink, Mode: 0o777, Link: target})
}

func (b *builder) dir(p string, mode int64) {
	if n := b.tree.Get(p); n != nil && n.Type == tar.TypeDir {
		return
	}
	b.tree.Put(p, &Node{Type: tar.TypeDir, Mode: mode})
}

// read returns the content of the regular file p resolves to, or nil.
func (b *builder) read(p string) ([]byte, error) {
	_, n, err := b.tree.Resolve(p)
	if err != nil || n == nil || n.Type != tar.TypeReg || n.Content == nil {
		return nil, err
	}
	rc, err := n.Content.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// mergedUsr links /bin, /sbin, /lib and friends to their /usr
// directories, where unpacking put their contents.
func (b *builder) mergedUsr() error {
	for _, d := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32", "libo32"} {
		if n := b.tree.Get("/usr/" + d); n != nil && n.Type == tar.TypeDir {
			b.tree.RemoveAll("/" + d)
			b.symlink("/"+d, "usr/"+d)
		}
	}
	return nil
}

// shadowGID is the shadow group in base-passwd's masters, which owns
// /etc/shadow and /etc/gshadow.
const shadowGID = 42

// accounts writes /etc/passwd and /etc/group from base-passwd's masters
// (its postinst copies them) with shadow files that lock every account;
// systemd-sysusers adds the services' users at boot.
func (b *builder) accounts() error {
	passwd, err := b.read("/usr/share/base-passwd/passwd.master")
	if err != nil {
		return err
	}
	group, err := b.read("/usr/share/base-passwd/group.master")
	if err != nil {
		return err
	}
	if passwd == nil || group == nil {
		b.note("accounts: no base-passwd masters in the image; /etc/passwd and /etc/group left as the packages made them")
		return nil
	}
	var pw, sh, gr, gsh bytes.Buffer
	for _, line := range lines(passwd) {
		f := strings.Split(line, ":")
		if len(f) != 7 {
			return fmt.Errorf("passwd.master: %q is not a passwd line", line)
		}
		f[1] = "x"
		pw.WriteString(strings.Join(f, ":") + "\n")
		sh.WriteString(f[0] + ":*::0:99999:7:::\n")
	}
	for _, line := range lines(group) {
		f := strings.Split(line, ":")
		if len(f) != 4 {
			return fmt.Errorf("group.master: %q is not a group line", line)
		}
		f[1] = "x"
		gr.WriteString(strings.Join(f, ":") + "\n")
		gsh.WriteString(f[0] + ":*::" + f[3] + "\n")
	}
	b.file("/etc/passwd", pw.Bytes(), 0o644, 0)
	b.file("/etc/group", gr.Bytes(), 0o644, 0)
	b.file("/etc/shadow", sh.Bytes(), 0o640, shadowGID)
	b.file("/etc/gshadow", gsh.Bytes(), 0o640, shadowGID)
	return nil
}

func lines(b []byte) []string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// caCertificates does what update-ca-certificates does for the bundle
// every TLS client reads: /etc/ssl/certs/ca-certificates.crt holds every
// certificate under /usr/share/ca-certificates, in the order of
// /etc/ca-certificates.conf, which lists them all; each also gets its
// /etc/ssl/certs/<name>.pem link. (The OpenSSL hash links are not made:
// Go, curl and containerd read the bundle.)
func (b *builder) caCertificates() error {
	const share = "/usr/share/ca-certificates"
	if n := b.tree.Get(share); n == nil || n.Type != tar.TypeDir {
		return nil
	}
	var certs []string
	for _, p := range b.tree.Paths() {
		if strings.HasPrefix(p, share+"/") && strings.HasSuffix(p, ".crt") && b.tree.Get(p).Type == tar.TypeReg {
			certs = append(certs, strings.TrimPrefix(p, share+"/"))
		}
	}
	var conf, bundle bytes.Buffer
	conf.WriteString("# Written by aks-flex-node image build: every certificate below " + share + " is trusted.\n")
	for _, c := range certs {
		data, err := b.read(share + "/" + c)
		if err != nil {
			return err
		}
		conf.WriteString(c + "\n")
		bundle.Write(data)
		if len(data) > 0 && data[len(data)-1] != '\n' {
			bundle.WriteByte('\n')
		}
		name := strings.TrimSuffix(path.Base(c), ".crt") + ".pem"
		b.symlink("/etc/ssl/certs/"+name, share+"/"+c)
	}
	b.file("/etc/ca-certificates.conf", conf.Bytes(), 0o644, 0)
	b.file("/etc/ssl/certs/ca-certificates.crt", bundle.Bytes(), 0o644, 0)
	b.note(fmt.Sprintf("ca-certificates: %d certificates in /etc/ssl/certs/ca-certificates.crt", len(certs)))
	return nil
}

// shells writes /etc/shells from debianutils' list (its postinst's
// update-shells).
func (b *builder) shells() error {
	if b.tree.Get("/etc/shells") != nil {
		return nil
	}
	data, err := b.read("/usr/share/debianutils/shells")
	if err != nil || data == nil {
		return err
	}
	b.file("/etc/shells", data, 0o644, 0)
	return nil
}

// machineID leaves /etc/machine-id empty: systemd then takes the ID
// systemd-nspawn passes in, without treating the boot as a first boot;
// dbus reads the same file.
func (b *builder) machineID() error {
	b.file("/etc/machine-id", nil, 0o444, 0)
	if n := b.tree.Get("/var/lib/dbus"); n != nil && n.Type == tar.TypeDir {
		b.symlink("/var/lib/dbus/machine-id", "/etc/machine-id")
	}
	return nil
}

// hosts writes the /etc/hosts the Debian installer and debootstrap leave
// (no package ships one): containerd's CRI copies the machine's into
// every pod sandbox and fails the pod without it. An image whose packages
// brought one keeps it.
func (b *builder) hosts() error {
	if b.tree.Get("/etc/hosts") != nil {
		return nil
	}
	b.file("/etc/hosts", []byte("127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\nff02::1\t\tip6-allnodes\nff02::2\t\tip6-allrouters\n"), 0o644, 0)
	return nil
}

// journal makes /var/log/journal, as systemd's postinst does, so the
// journal is persistent and can be read from outside the machine
// (journalctl -D) after it stopped; systemd-tmpfiles sets its group at
// boot.
func (b *builder) journal() error {
	if b.tree.Get("/usr/lib/systemd/systemd-journald") == nil {
		return nil
	}
	b.dir("/var/log/journal", 0o2755)
	return nil
}

// systemdUnits sets the default target and masks the units the spec
// names.
func (b *builder) systemdUnits() error {
	unitDir := "/usr/lib/systemd/system"
	if n := b.tree.Get(unitDir); n == nil || n.Type != tar.TypeDir {
		if len(b.spec.MaskUnits) > 0 {
			return fmt.Errorf("the spec masks units, but the image has no %s", unitDir)
		}
		return nil
	}
	target := b.spec.defaultTarget()
	if b.tree.Get(unitDir+"/"+target) == nil {
		return fmt.Errorf("default target %s: no %s/%s in the image", target, unitDir, target)
	}
	b.symlink("/etc/systemd/system/default.target", unitDir+"/"+target)
	for _, u := range b.spec.MaskUnits {
		b.symlink("/etc/systemd/system/"+u, "/dev/null")
	}
	return nil
}
