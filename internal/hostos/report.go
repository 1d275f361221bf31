package hostos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
)

// Report is everything Inspect found, in the JSON shape install.sh and
// `aks-flex-node` output consume. Slices are never nil so JSON never shows
// null where a list is expected.
type Report struct {
	OS             ReportOS      `json:"os"`
	OSReleasePath  string        `json:"osReleasePath"`
	Family         Family        `json:"family"`
	UsrReadOnly    bool          `json:"usrReadOnly"`
	PackageManager string        `json:"packageManager"` // only a usable one; see notes otherwise
	SELinux        string        `json:"selinux"`
	Systemd        ReportSystemd `json:"systemd"`
	Nspawn         ReportNspawn  `json:"nspawn"`
	CgroupMode     string        `json:"cgroupMode"`
	Notes          []string      `json:"notes"`
}

// ReportOS is the os-release subset in a Report.
type ReportOS struct {
	ID         string   `json:"id"`
	IDLike     []string `json:"idLike"`
	VariantID  string   `json:"variantId"`
	VersionID  string   `json:"versionId"`
	PrettyName string   `json:"prettyName"`
}

// ReportSystemd is the systemd part of a Report.
type ReportSystemd struct {
	Present bool `json:"present"`
	Version int  `json:"version"`
}

// ReportNspawn is the systemd-nspawn part of a Report.
type ReportNspawn struct {
	Present bool `json:"present"`
}

// noteUsrNotProbed starts the note that explains why usrReadOnly is false
// without having been measured; Summary looks for it so that a report read
// back from JSON still does not claim a writable /usr.
const noteUsrNotProbed = "usrReadOnly not probed: "

// Inspect probes the host tree at root ("" means "/").
func Inspect(ctx context.Context, root string) (*Report, error) {
	return (&Prober{Root: root}).Inspect(ctx)
}

// Inspect runs every probe. A probe that cannot answer leaves its field at
// the zero value and adds a note saying why; the error is only for a root
// that cannot be inspected at all or a cancelled context.
func (p *Prober) Inspect(ctx context.Context) (*Report, error) {
	root := p.root()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("inspect %s: %w", root, err)
	}
	if fi, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("inspect %s: %w", root, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("inspect %s: not a directory", root)
	}

	r := &Report{OS: ReportOS{IDLike: []string{}}, Family: FamilyUnknown, Notes: []string{}}
	note := func(format string, args ...any) { r.Notes = append(r.Notes, fmt.Sprintf(format, args...)) }

	if o, path, err := ReadOSRelease(root); err != nil {
		note("os-release: %v", err)
	} else {
		r.OSReleasePath = path
		r.OS = ReportOS{ID: o.ID, IDLike: o.IDLike, VariantID: o.VariantID, VersionID: o.VersionID, PrettyName: o.PrettyName}
		r.Family = Classify(o)
		for _, w := range o.Warnings {
			note("%s: %s", path, w)
		}
	}
	if r.Family == FamilyUnknown {
		note("family unknown: ID=%q ID_LIKE=%q is not a distribution this agent knows", r.OS.ID, strings.Join(r.OS.IDLike, " "))
	}

	if mounts, err := p.Mounts(); err != nil {
		why := err.Error()
		if errors.Is(err, ErrLiveHostOnly) {
			why = "--root is not /"
		}
		note(noteUsrNotProbed+"%s", why)
		note("cgroupMode not probed: %s", why)
		note("sysext overlays not probed: %s", why)
	} else {
		var m Mount
		r.UsrReadOnly, m = UsrReadOnly(mounts)
		if r.UsrReadOnly {
			note("/usr is read-only: served by mount %s (%s %s, options %s)", m.MountPoint, m.FSType, m.Source, strings.Join(m.Options, ","))
		}
		r.CgroupMode = CgroupMode(mounts)
		if r.CgroupMode == "" {
			note("cgroupMode unknown: no cgroup mount at %s in %s", cgroupRoot, p.MountInfoPath())
		}
		ws := isDir(root, sysextWorkspace)
		for _, dir := range []string{"/usr", "/opt"} {
			if s := DetectSysext(mounts, dir, ws); s.Covered {
				note("%s is covered by a systemd-sysext overlay at %s: %s", dir, s.MountPoint, strings.Join(s.Evidence, "; "))
			}
		}
	}

	pm := DetectPackageManager(root)
	if pm.Usable {
		r.PackageManager = pm.Name
	} else if pm.Name != "" {
		note("package manager not usable: %s", pm.Detail)
	}

	sel := DetectSELinux(root)
	r.SELinux = sel.Mode
	if sel.Mode != "" && sel.Source != "/sys/fs/selinux/enforce" && p.live() {
		note("selinux %s is from %s: selinuxfs is not mounted, so it is not what the kernel enforces now", sel.Mode, sel.Source)
	}

	sd := p.Systemd(ctx)
	r.Systemd = ReportSystemd{Present: sd.Present, Version: sd.Version}
	r.Notes = append(r.Notes, sd.Notes...)

	ns := DetectNspawn(root)
	r.Nspawn = ReportNspawn{Present: ns.Present}
	if !ns.Present {
		note("systemd-nspawn not found in %s", strings.Join(toolDirs, ", "))
	}
	if !ns.Machinectl {
		note("machinectl not found in %s", strings.Join(toolDirs, ", "))
	}

	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("inspect %s: %w", root, err)
	}
	return r, nil
}

func (r *Report) usrProbed() bool {
	for _, n := range r.Notes {
		if strings.HasPrefix(n, noteUsrNotProbed) {
			return false
		}
	}
	return true
}

// Summary is one line for install.sh output, e.g.
// "Azure Container Linux 3.0 (read-only /usr, no package manager)".
func (r *Report) Summary() string {
	var name string
	switch r.Family {
	case FamilyRHEL, FamilyUnknown, "":
		// The family name says nothing useful about which of these it is.
		name = r.OS.PrettyName
		if name == "" {
			name = strings.TrimSpace(r.OS.ID + " " + r.OS.VersionID)
		}
		if name == "" {
			name = "unknown OS"
		}
	default:
		name = strings.TrimSpace(r.Family.Describe() + " " + r.OS.VersionID)
	}
	var traits []string
	if !r.Family.Supported() {
		traits = append(traits, "unsupported")
	}
	switch {
	case !r.usrProbed():
		traits = append(traits, "/usr not probed")
	case r.UsrReadOnly:
		traits = append(traits, "read-only /usr")
	default:
		traits = append(traits, "writable /usr")
	}
	if r.PackageManager == "" {
		traits = append(traits, "no package manager")
	} else {
		traits = append(traits, "package manager "+r.PackageManager)
	}
	return name + " (" + strings.Join(traits, ", ") + ")"
}

// WriteText writes the report for a person, one fact per line, notes last.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	yesNo := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	orNone := func(s, none string) string {
		if s == "" {
			return none
		}
		return s
	}
	fam := string(r.Family) + " (" + r.Family.Describe()
	if r.Family.ImageBased() {
		fam += ", image-based"
	}
	fam += ")"
	sd := "not found"
	if r.Systemd.Present {
		sd = "present"
		if r.Systemd.Version > 0 {
			sd += fmt.Sprintf(", version %d", r.Systemd.Version)
		}
	}
	usr := yesNo(r.UsrReadOnly)
	if !r.usrProbed() {
		usr = "not probed"
	}
	rows := [][2]string{
		{"OS", orNone(r.OS.PrettyName, "unknown")},
		{"os-release", orNone(r.OSReleasePath, "not found")},
		{"ID", fmt.Sprintf("%s (like: %s)", orNone(r.OS.ID, "-"), orNone(strings.Join(r.OS.IDLike, " "), "-"))},
		{"variant / version", orNone(r.OS.VariantID, "-") + " / " + orNone(r.OS.VersionID, "-")},
		{"family", fam},
		{"/usr read-only", usr},
		{"package manager", orNone(r.PackageManager, "none")},
		{"SELinux", orNone(r.SELinux, "absent")},
		{"systemd", sd},
		{"systemd-nspawn", map[bool]string{true: "present", false: "not found"}[r.Nspawn.Present]},
		{"cgroup mode", orNone(r.CgroupMode, "unknown")},
	}
	for _, row := range rows {
		fmt.Fprintf(tw, "%s:\t%s\n", row[0], row[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Notes) > 0 {
		if _, err := fmt.Fprintln(w, "notes:"); err != nil {
			return err
		}
		for _, n := range r.Notes {
			if _, err := fmt.Fprintf(w, "  - %s\n", n); err != nil {
				return err
			}
		}
	}
	return nil
}
