package preflight

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/ignition"
)

const aclOSRelease = "ID=flatcar\nID_LIKE=azurelinux\nVARIANT_ID=azurecontainerlinux\nVERSION_ID=3.0\nPRETTY_NAME=\"Azure Container Linux 3.0\"\n"

func payloadFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "ignition", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestProvisioningPayload(t *testing.T) {
	ign := payloadFile(t, "handwritten-usr.ign")
	unrelated := payloadFile(t, "unrelated.ign")
	sh := payloadFile(t, "join.sh")
	cc := payloadFile(t, "cloud-config.yaml")
	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	cases := []struct {
		name       string
		osRelease  string
		customData string // "" means absent
		sev        Severity
		want       []string
	}{
		{"nothing", "", "", SeverityOK, []string{"no provisioning payload found", ignition.DefaultCustomDataPath + " absent"}},
		{"ignition on debian", "", b64(unrelated), SeverityError, []string{ignition.DefaultCustomDataPath, "spec 3.4.0", "does not run Ignition"}},
		{"raw ignition on debian", "", string(unrelated), SeverityError, []string{"spec 3.4.0", "family debian"}},
		{"shell on debian", "", b64(sh), SeverityOK, []string{"shell script [#!/bin/bash, base64]"}},
		{"cloud-config on debian", "", string(cc), SeverityOK, []string{"cloud-config"}},
		{"usr config on ACL", aclOSRelease, b64(ign), SeverityError, []string{"$.storage.files.1.path", "/usr/local/bin/aks-flex-node"}},
		{"unrelated ignition on ACL", aclOSRelease, b64(unrelated), SeverityOK, []string{"Ignition config (spec 3.4.0)", "family acl"}},
		{"shell on ACL", aclOSRelease, b64(sh), SeverityWarning, []string{"does not run it"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t)
			if tc.osRelease != "" {
				h.file("etc/os-release", tc.osRelease)
			}
			if tc.customData != "" {
				h.file("var/lib/waagent/CustomData", tc.customData)
			}
			r := h.run(NameProvisioningPayload)
			if r.Severity != tc.sev {
				t.Fatalf("severity %s, want %s: %s", r.Severity, tc.sev, r.Message)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.Message, w) {
					t.Errorf("message lacks %q: %s", w, r.Message)
				}
			}
			if tc.sev != SeverityOK && r.Remedy == "" {
				t.Error("no remedy")
			}
		})
	}
}

// With IMDS configured, userData is read from it (a fake speaking the
// documented protocol on loopback).
func TestProvisioningPayloadIMDS(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Metadata") != "true" {
			http.Error(w, "Bad request. Required metadata header not specified", http.StatusBadRequest)
			return
		}
		_, _ = w.Write([]byte(base64.StdEncoding.EncodeToString(payloadFile(t, "unrelated.ign"))))
	}))
	defer srv.Close()
	h := newHost(t)
	env := h.env()
	env.Provisioning = &ignition.Sources{IMDSEndpoint: srv.URL}
	r := runNamed(t, env, NameProvisioningPayload)
	if r.Severity != SeverityError || !strings.Contains(r.Message, "IMDS userData ("+srv.URL+") holds an Ignition config (spec 3.4.0)") {
		t.Fatalf("%s: %s", r.Severity, r.Message)
	}
}
