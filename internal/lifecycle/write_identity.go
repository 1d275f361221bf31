package lifecycle

import (
	"context"
	"fmt"
	"os"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/identity"
	"github.com/Azure/aks-flex-node/internal/task"
)

type writeIdentity struct {
	host   Host
	config *config.Config
}

// WriteIdentity returns the task that writes the identity dir the
// kubelet's credential plugin reads inside the machine (identity.SaveDir):
// the identity the config names, a certificate's content, and for a
// service principal the host's trusted roots, since the machine's image
// may not trust the authority the host does. With a bootstrap token it
// removes a dir an earlier identity join left, secrets and all.
func WriteIdentity(h Host, c *config.Config) task.Task {
	return &writeIdentity{host: h, config: c}
}

func (t *writeIdentity) Name() string { return "write-identity" }

func (t *writeIdentity) Do(ctx context.Context) (task.Result, error) {
	l := t.host.Layout
	dir := l.OnRoot(l.IdentityDir())
	s, ok, err := identity.FromConfig(t.config, identity.ReadSecretFile(l.Root()))
	if err != nil {
		return task.Result{}, err
	}
	if !ok {
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			return task.Result{Detail: "bootstrap token: no identity"}, nil
		}
		if err := os.RemoveAll(dir); err != nil {
			return task.Result{}, fmt.Errorf("remove %s: %w", l.IdentityDir(), err)
		}
		return task.Result{Changed: true, Detail: "bootstrap token: removed the identity of an earlier join"}, nil
	}
	if s.Method == identity.MethodServicePrincipal {
		if s.RootCAs, err = identity.HostRoots(l.Root()); err != nil {
			return task.Result{}, err
		}
	}
	if err := t.host.track(l.IdentityDir()); err != nil {
		return task.Result{}, err
	}
	if err := fsutil.MkdirAll(l.OnRoot(l.StateDir()), 0o755); err != nil {
		return task.Result{}, err
	}
	changed, err := identity.SaveDir(dir, s)
	if err != nil {
		return task.Result{}, fmt.Errorf("write %s: %w", l.IdentityDir(), err)
	}
	return task.Result{Changed: changed, Detail: s.Method}, nil
}
