package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/ignition"
)

// start, preflight, node upgrade and the support bundle get preflight's
// environment from preflightEnv alone: no command makes its own.
func TestPreflightEnvMadeInOnePlace(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	made := map[string]int{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "preflight.Env{"); n > 0 {
			made[f] = n
		}
	}
	if len(made) != 1 || made["preflight.go"] != 1 {
		t.Errorf("preflight.Env is made in %v, want once, in preflightEnv (preflight.go)", made)
	}
}

// The environment reads the config it is given and the provisioning
// sources the process environment names.
func TestPreflightEnvSources(t *testing.T) {
	t.Setenv(ignition.EnvCustomData, "/tmp/custom-data")
	t.Setenv(ignition.EnvIMDSEndpoint, ignition.IMDSOff)
	c, err := config.Load(aclExample)
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Layout("/", aclExample)
	if err != nil {
		t.Fatal(err)
	}
	env := preflightEnv(c, aclExample, l)
	if env.Root != "/" || env.Config != c || env.ConfigFile != aclExample || env.Layout.BinDir() != l.BinDir() {
		t.Errorf("env %+v", env)
	}
	if p := env.Provisioning; p == nil || p.CustomData != "/tmp/custom-data" || p.IMDSEndpoint != ignition.IMDSOff {
		t.Errorf("provisioning sources %+v", p)
	}
}
