package integration

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/fakeimds"
)

// fakeIMDS serves userData inside the host's network namespace and returns
// the base URL and a hit counter.
func fakeIMDS(t *testing.T, h *aclhost.Host, userData []byte) (string, *atomic.Int32) {
	t.Helper()
	l, err := h.ListenTCP("127.0.0.1:0")
	must(t, err)
	return fakeimds.Serve(t, l, userData)
}

type provisioningReport struct {
	Family       string `json:"family"`
	Provisioning struct {
		Payloads []struct {
			Source, Kind, Spec, Encoding string
		} `json:"payloads"`
		Problems []struct {
			Severity, Message string
		} `json:"problems"`
	} `json:"provisioning"`
}

// TestProvisioningPayloadDetection puts real payload files where Azure's
// agent leaves customData, on a plain Debian host and on the ACL-like host,
// and reads what `host inspect` and `preflight` make of them, with userData
// from a fake IMDS inside the host.
func TestProvisioningPayloadDetection(t *testing.T) {
	aclhost.RequireE2E(t)
	td := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(repoRoot(), "internal/ignition/testdata", name))
		must(t, err)
		return b
	}
	b64 := func(b []byte) []byte { return []byte(base64.StdEncoding.EncodeToString(b)) }
	type expect struct{ severity, contains string }
	for _, v := range []aclhost.Variant{aclhost.Debian, aclhost.ACL} {
		t.Run(string(v), func(t *testing.T) {
			t.Parallel()
			h := prepare(t, v, testConfig(t, "/opt/aks-flex-node"))
			// Our own config, rendered in the host by the real command.
			h.RunOK(t, "/root/dist/aks-flex-node", "ignition", "render", "--config", "/etc/aks-flex-node/config.json",
				"--binary-url", "https://example.invalid/aks-flex-node", "--binary-sha256", fileSHA256(t, agentBinary),
				"--output", "/root/rendered.ign")
			rendered := []byte(h.RunOK(t, "cat", "/root/rendered.ign"))
			// userData that is fine on each host, so the customData cases
			// decide the verdict: a cloud-config on Debian, an Ignition
			// config that does not install the agent on ACL.
			userData, userKind := td("cloud-config.yaml"), "cloud-config"
			if v == aclhost.ACL {
				userData, userKind = td("unrelated.ign"), "ignition"
			}
			imds, hits := fakeIMDS(t, h, userData)

			cases := []struct {
				name       string
				customData []byte
				debian     expect
				acl        expect
			}{
				{"rendered ignition, base64", b64(rendered),
					expect{"error", "/var/lib/waagent/CustomData holds an Ignition config (spec 3.3.0), but this host (family debian) does not run Ignition"},
					expect{"ok", "Ignition config (spec 3.3.0)"}},
				{"hand-written ignition under /usr, raw", td("handwritten-usr.ign"),
					expect{"error", "Ignition config (spec 3.3.0), but this host (family debian)"},
					expect{"error", "/usr/local/bin/aks-flex-node is under /usr"}},
				{"shell script, base64", b64(td("join.sh")),
					expect{"ok", "shell script [#!/bin/bash, base64]"},
					expect{"warning", "is a shell script [#!/bin/bash, base64], but this host (family acl) is provisioned by Ignition"}},
				{"cloud-config, raw", td("cloud-config.yaml"),
					expect{"ok", "/var/lib/waagent/CustomData: cloud-config"},
					expect{"warning", "cloud-config, but this host (family acl)"}},
			}
			for _, tc := range cases {
				want := tc.debian
				if v == aclhost.ACL {
					want = tc.acl
				}
				must(t, h.WriteFile("/var/lib/waagent/CustomData", tc.customData, 0o600))
				env := "AKS_FLEX_NODE_IMDS_ENDPOINT=" + imds

				out := h.RunOK(t, "env", env, "/root/dist/aks-flex-node", "host", "inspect", "--output", "json")
				var r provisioningReport
				if err := json.Unmarshal([]byte(out), &r); err != nil {
					t.Fatalf("%s: host inspect JSON: %v\n%s", tc.name, err, out)
				}
				if len(r.Provisioning.Payloads) != 2 || r.Provisioning.Payloads[1].Kind != userKind || !strings.HasPrefix(r.Provisioning.Payloads[1].Source, "IMDS userData") {
					t.Errorf("%s: payloads %+v", tc.name, r.Provisioning.Payloads)
				}
				var msgs []string
				worst := "ok"
				for _, p := range r.Provisioning.Problems {
					msgs = append(msgs, p.Severity+": "+p.Message)
					if p.Severity == "error" || worst == "ok" {
						worst = p.Severity
					}
				}
				text := strings.Join(msgs, "\n")
				if worst != want.severity || (want.severity != "ok" && !strings.Contains(text, want.contains)) {
					t.Errorf("%s on %s: host inspect: %s, want %s containing %q:\n%s", tc.name, v, worst, want.severity, want.contains, text)
				}

				stdout, _, _ := h.Run(context.Background(), "env", env, "/root/dist/aks-flex-node", "preflight",
					"--ignore-preflight-errors=api-server-reachable,bootstrap-token", "--output", "json")
				var pr preflightReport
				if err := json.Unmarshal([]byte(stdout), &pr); err != nil {
					t.Fatalf("%s: preflight JSON: %v\n%s", tc.name, err, stdout)
				}
				sev, msg, _ := pr.check(t, "provisioning-payload")
				if sev != want.severity || !strings.Contains(msg, want.contains) {
					t.Errorf("%s on %s: preflight provisioning-payload %s: %s; want %s containing %q", tc.name, v, sev, msg, want.severity, want.contains)
				}
				t.Logf("%s on %s: %s: %s", tc.name, v, sev, msg)
			}
			if n := hits.Load(); n != int32(2*len(cases)) {
				t.Errorf("fake IMDS answered %d userData requests, want %d", n, 2*len(cases))
			}
		})
	}
}
