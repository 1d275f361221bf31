package preflight

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/config"
)

func TestKubeletSkew(t *testing.T) {
	for _, c := range []struct {
		kubelet, server, err string
	}{
		{"1.35.4", "v1.35.4", ""},
		{"1.34.2", "v1.35.4", ""},
		{"1.35.9", "v1.35.4", ""}, // the policy counts minor versions
		{"1.32.0", "v1.35.4", ""},
		{"1.31.0", "v1.35.4", "4 minor versions older"},
		{"1.36.0", "v1.35.4", "newer than the API server"},
		{"2.35.0", "v1.35.4", "major"},
		{"x", "v1.35.4", "kubelet version"},
	} {
		err := KubeletSkew(c.kubelet, c.server)
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("KubeletSkew(%s, %s) = %v, want %q", c.kubelet, c.server, err, c.err)
		}
	}
}

func TestVersionSkewCheck(t *testing.T) {
	c := &config.Config{}
	c.Components.Kubernetes = "1.36.0"
	env := &Env{Root: t.TempDir(), Config: c, ServerVersion: func(context.Context) (string, error) { return "v1.35.4", nil }}
	if r := versionSkewCheck(env).Run(t.Context()); r.Severity != SeverityError || !strings.Contains(r.Message, "newer") {
		t.Errorf("1.36 against 1.35: %+v", r)
	}
	c.Components.Kubernetes = "1.35.4"
	if r := versionSkewCheck(env).Run(t.Context()); r.Severity != SeverityOK {
		t.Errorf("1.35.4 against 1.35.4: %+v", r)
	}
	env.ServerVersion = func(context.Context) (string, error) { return "", errors.New("refused") }
	if r := versionSkewCheck(env).Run(t.Context()); r.Severity != SeverityError || !strings.Contains(r.Message, "refused") {
		t.Errorf("unreachable: %+v", r)
	}
	if n := len(RepaveChecks(env)); n != len(RepaveNames) {
		t.Errorf("RepaveChecks: %d checks, RepaveNames %d", n, len(RepaveNames))
	}
}
