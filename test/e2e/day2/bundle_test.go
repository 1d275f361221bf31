package day2

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// manifest is the part of the bundle's manifest.json the test reads.
type manifest struct {
	Joined  bool `json:"joined"`
	Members []struct {
		Path string `json:"path"`
	} `json:"members"`
	Missing []struct {
		Path   string `json:"path"`
		Reason string `json:"reason"`
	} `json:"missing"`
	Redactions int `json:"redactions"`
}

// bundle runs `debug bundle` on the host into file and opens the archive
// with tar(1): it returns the directory it was extracted into, the
// manifest and the command's last line.
func (e *env) bundle(t *testing.T, bin, file string) (string, manifest, string) {
	t.Helper()
	out, stderr, err := e.h.Run(e.ctx, bin, "debug", "bundle", "--output", file)
	if err != nil {
		t.Fatalf("debug bundle: %v\n%s\n%s", err, out, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	fi, err := os.Stat(e.h.Path(file))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("bundle mode %v, want 0600", fi.Mode().Perm())
	}
	dir := t.TempDir()
	if b, err := exec.Command("tar", "-xzf", e.h.Path(file), "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("tar -xzf: %v\n%s", err, b)
	}
	// Every member is under one top directory, named after the bundle.
	top, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(top) != 1 || !top[0].IsDir() {
		t.Fatalf("the archive has %d entries at its top, want one directory", len(top))
	}
	dir = filepath.Join(dir, top[0].Name())
	var m manifest
	data, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	t.Logf("debug bundle: %s (%d bytes, %d members, %d missing, %d redactions)", last, fi.Size(), len(m.Members), len(m.Missing), m.Redactions)
	return dir, m, last
}

// unjoinedBundle: before install and start the bundle is written, opens,
// and its manifest says what is missing and why.
func (e *env) unjoinedBundle(t *testing.T) {
	dir, m, last := e.bundle(t, "/root/dist/aks-flex-node", "/root/unjoined.tar.gz")
	if m.Joined {
		t.Error("manifest says joined on a host that has not joined")
	}
	missing := map[string]string{}
	for _, x := range m.Missing {
		missing[x.Path] = x.Reason
	}
	t.Logf("missing before the join: %v", missing)
	if len(missing) == 0 {
		t.Error("the manifest of an unjoined host names nothing missing")
	}
	if _, ok := missing["logs/agent"]; !ok {
		t.Error("no agent log files, yet logs/agent is not listed as missing")
	}
	for _, p := range []string{"reports/debug.json", "reports/status.json", "host/os-release", "host/routes"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("unjoined bundle: %v", err)
		}
	}
	if !strings.Contains(last, "missing") {
		t.Errorf("last line does not say what is missing: %q", last)
	}
}

// joinedBundle plants secrets where a support bundle reaches (the
// config's bootstrap token is one already; the kubelet's private key is
// in the machine; a bearer token, a JWT and a client secret go into the
// agent's log), then checks the archive's members and that none of the
// secrets is in any of them.
func (e *env) joinedBundle(t *testing.T) {
	bearer := "plantedBearerToken0123456789abcdef"
	jwt := "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJwbGFudGVkIn0.cGxhbnRlZHNpZ25hdHVyZTAxMjM0NTY3ODk"
	secret := "plantedClientSecret~0123456789"
	plant := "Authorization: Bearer " + bearer + "\nid_token=" + jwt + "\n\"clientSecret\": \"" + secret + "\"\n"
	e.h.ShellOK(t, "ls "+logDir+"/agent.log && printf '%s' '"+plant+"' >> "+logDir+"/agent.log")

	// The current-certificate link is absolute inside the machine.
	target, err := os.Readlink(e.h.Path(clientCertLink))
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(target) {
		target = filepath.Join(filepath.Dir(clientCertLink), target)
	} else {
		target = machineRoot + target
	}
	pemData, err := os.ReadFile(e.h.Path(target))
	if err != nil {
		t.Fatal(err)
	}
	var keyLines []string
	for rest := pemData; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if strings.Contains(b.Type, "PRIVATE KEY") {
			// Each 64-column line of the key's base64 on its own.
			body := strings.Split(strings.TrimSpace(string(pem.EncodeToMemory(b))), "\n")
			keyLines = append(keyLines, body[1:len(body)-1]...)
		}
	}
	if len(keyLines) == 0 {
		t.Fatal("no private key in the kubelet's client certificate file")
	}
	secrets := append([]string{e.cp.TokenSecret, bearer, jwt, secret}, keyLines...)

	dir, m, _ := e.bundle(t, agent, "/root/joined.tar.gz")
	if !m.Joined {
		t.Error("manifest of a joined host says not joined")
	}
	for _, x := range m.Missing {
		t.Logf("missing: %s: %s", x.Path, x.Reason)
	}
	for _, p := range []string{"manifest.json", "reports/version.json", "reports/status.json", "reports/debug.json", "reports/debug.txt",
		"reports/preflight.json", "reports/host-inspect.json", "agent/healthz.json", "agent/metrics.txt",
		"host/config.json", "host/mounts", "host/addresses", "host/routes", "host/rules", "host/nftables",
		"units/host/aks-flex-node-agent.service", "logs/agent/agent.log", "logs/journal/aks-flex-node-agent.service.log",
		"machines/kube1/etc/kubernetes/kubelet.conf"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("joined bundle lacks %s", p)
		}
	}
	var kubeletJournal bool
	found := map[string]string{}
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if strings.HasPrefix(rel, "logs/journal/kube1/") && strings.Contains(rel, "kubelet") {
			kubeletJournal = true
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, s := range secrets {
			if bytes.Contains(data, []byte(s)) {
				found[s] = rel
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for s, rel := range found {
		t.Errorf("planted secret %.12s... is in bundle member %s", s, rel)
	}
	if !kubeletJournal {
		t.Error("no kubelet journal of machine kube1 in the bundle")
	}
	// The redaction left a mark where the planted lines were.
	log, _ := os.ReadFile(filepath.Join(dir, "logs/agent/agent.log"))
	if !bytes.Contains(log, []byte("Authorization: Bearer ")) {
		t.Errorf("the planted Authorization line is gone from logs/agent/agent.log, not redacted in place")
	}
}
