package controlplane

import (
	"os"
	"path/filepath"
)

// auditArgs writes opts.AuditPolicy and returns the kube-apiserver flags
// that log by it to c.AuditLog; none without a policy.
func (c *ControlPlane) auditArgs(opts *Options) ([]string, error) {
	if len(opts.AuditPolicy) == 0 {
		return nil, nil
	}
	policy := filepath.Join(c.WorkDir, "audit-policy.yaml")
	if err := os.WriteFile(policy, opts.AuditPolicy, 0o600); err != nil {
		return nil, err
	}
	c.AuditLog = filepath.Join(c.LogsDir, "audit.log")
	return []string{"--audit-policy-file=" + policy, "--audit-log-path=" + c.AuditLog, "--audit-log-format=json"}, nil
}
