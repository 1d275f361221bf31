// Package genfile owns the text of every file aks-flex-node generates for
// systemd, the kernel or a shell to read: the unit files on the host and
// inside the machine, the .nspawn settings and the systemd-nspawn@ drop-in,
// the sysctl and modules-load files, and the recovery and cgroup scripts.
// Each file's text is one template in assets/, named after what it is, not
// where it goes. Render fills one in, puts the one generated-file header on
// top, and checks that the result parses as what it claims to be, so a
// template or a value that breaks a file fails the render instead of the
// host's boot.
//
// It owns text only. Which values go in, and where a file is written, stay
// with the package that owns the file: systemd (agent and first-boot
// units), upgrade (recovery unit, timer and script), machine (.nspawn and
// drop-in), node (units and scripts inside the machine) and bootstrap
// (sysctl and modules-load). Values are interpolated unquoted; the callers
// admit only bytes that mean nothing to systemd or a shell (layout.New for
// paths, node and machine for their own inputs).
package genfile

import (
	"bytes"
	"embed"
	"fmt"
	"sync"
	"text/template"
)

// Header is the first line of every generated file (the second of a script,
// after its #! line). Files whose format has no comments (JSON) and files
// written in another tool's format (kubeconfig) go without it.
const Header = "# Written by aks-flex-node; changes are overwritten.\n"

// Name is a template in assets/.
type Name string

// The templates. Units on the host:
const (
	AgentUnit     Name = "agent.service"
	FirstBootUnit Name = "firstboot.service"
	RecoveryUnit  Name = "recovery.service"
	RecoveryTimer Name = "recovery.timer"
	// RecoveryScript is a bash script; .tmpl keeps the unrendered text out
	// of the repository's shellcheck run (the rendered script is linted by
	// internal/agentupgrade's tests).
	RecoveryScript Name = "recovery.sh.tmpl"
)

// Machine settings on the host: the .nspawn file and the drop-in for the
// machine's systemd-nspawn@<name>.service.
const (
	NspawnSettings Name = "machine.nspawn"
	NspawnDropIn   Name = "nspawn-service.conf"
)

// Kernel settings on the host: a sysctl.d file (data: [][2]string of
// key and value) and a modules-load.d file (data: []string of modules).
const (
	Sysctl      Name = "sysctl.conf"
	ModulesLoad Name = "modules-load.conf"
)

// Units and scripts inside the machine.
const (
	KubeletUnit    Name = "kubelet.service"
	KubeProxyUnit  Name = "kube-proxy.service"
	ContainerdUnit Name = "containerd.service"
	CgroupRWUnit   Name = "cgroup-rw.service"
	CgroupRWScript Name = "cgroup-rw.sh"
)

// checks says how each template's output is checked; a template missing
// here cannot be rendered (TestEveryAssetIsKnown keeps the two in step).
var checks = map[Name]func([]byte) error{
	AgentUnit:      unitSections("Unit", "Service", "Install"),
	FirstBootUnit:  unitSections("Unit", "Service", "Install"),
	RecoveryUnit:   unitSections("Unit", "Service"),
	RecoveryTimer:  unitSections("Unit", "Timer", "Install"),
	RecoveryScript: checkScript,
	NspawnSettings: unitSections("Exec", "Files", "Network"),
	NspawnDropIn:   unitSections("Service"),
	Sysctl:         checkSysctl,
	ModulesLoad:    checkModules,
	KubeletUnit:    unitSections("Unit", "Service", "Install"),
	KubeProxyUnit:  unitSections("Unit", "Service", "Install"),
	ContainerdUnit: unitSections("Unit", "Service", "Install"),
	CgroupRWUnit:   unitSections("Unit", "Service", "Install"),
	CgroupRWScript: checkScript,
}

//go:embed assets
var assets embed.FS

// missingkey=error: a map value the template names but data lacks is an
// error, as a missing struct field already is, never an empty string.
// Parsed on first use: this binary is also the kubelet's credential
// plugin, which renders nothing and must start fast.
var templates = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("").Option("missingkey=error").ParseFS(assets, "assets/*"))
})

// Render fills template n in with data, puts Header on top and checks the
// result. Errors name the template; the caller adds the file it renders.
func Render(n Name, data any) ([]byte, error) {
	check, ok := checks[n]
	if !ok || templates().Lookup(string(n)) == nil {
		return nil, fmt.Errorf("template %s: no such template", n)
	}
	var b bytes.Buffer
	if err := templates().ExecuteTemplate(&b, string(n), data); err != nil {
		return nil, fmt.Errorf("template %s: %w", n, err)
	}
	out := WithHeader(b.Bytes())
	if err := check(out); err != nil {
		return nil, fmt.Errorf("template %s: rendered text %w", n, err)
	}
	return out, nil
}

// WithHeader returns body with Header on top, or after the #! line of a
// script. Files marshalled from Go types (the kubelet's config.yaml,
// containerd's config.toml) take the header this way.
func WithHeader(body []byte) []byte {
	out := make([]byte, 0, len(Header)+len(body))
	if bytes.HasPrefix(body, []byte("#!")) {
		first, rest, _ := bytes.Cut(body, []byte("\n"))
		out = append(append(append(out, first...), '\n'), Header...)
		return append(out, rest...)
	}
	return append(append(out, Header...), body...)
}
