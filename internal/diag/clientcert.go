package diag

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"time"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/preflight"
)

// rotationDue is when, in a certificate's lifetime, the kubelet has
// rotated it at the latest: it picks a time between 70 and 90 percent.
const rotationDue = 0.9

// checkClientCert: the kubelet's client certificate is valid now, is this
// node's, and is rotated before it expires.
func checkClientCert(e *Env) preflight.Check {
	return preflight.NewCheck(NameClientCert, node.KubeletClientCert, func(context.Context) preflight.Result {
		data, err := fsutil.ReadFileIn(e.machineRoot(), node.KubeletClientCert, 1<<20)
		if err != nil {
			return preflight.Error("the kubelet has no client certificate: its TLS bootstrap did not finish or the file was removed; aks-flex-node reset, then aks-flex-node start with a valid bootstrap token",
				"read %s in machine %s: %v", node.KubeletClientCert, e.machineName(), err)
		}
		cert, err := firstCertificate(data)
		if err != nil {
			return preflight.Error("aks-flex-node reset, then aks-flex-node start with a valid bootstrap token, gives the kubelet a new certificate",
				"%s in machine %s: %v", node.KubeletClientCert, e.machineName(), err)
		}
		return judgeCert(e, cert)
	})
}

// humanAge rounds an age to what matters at its size.
func humanAge(d time.Duration) string {
	if d >= time.Hour {
		return d.Round(time.Minute).String()
	}
	return d.Round(time.Second).String()
}

func firstCertificate(data []byte) (*x509.Certificate, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, fmt.Errorf("no certificate in it")
		}
		if b.Type == "CERTIFICATE" {
			return x509.ParseCertificate(b.Bytes)
		}
	}
}

func judgeCert(e *Env, c *x509.Certificate) preflight.Result {
	now := e.now()
	name := e.nodeName()
	restart := fmt.Sprintf("restart the kubelet (nsenter -t $(machinectl show %s -p Leader --value) -a systemctl restart kubelet): with an unusable certificate it bootstraps again with the token in %s if that is still valid; otherwise aks-flex-node reset, then aks-flex-node start with a new bootstrap token", e.machineName(), node.BootstrapKubeconf)
	switch {
	case now.After(c.NotAfter):
		return preflight.Error(restart+"; then see why it was not rotated: "+e.unitHint("kubelet.service")+" | grep certificate",
			"expired %s ago, at %s (subject %s)", humanAge(now.Sub(c.NotAfter)), c.NotAfter.UTC().Format(time.RFC3339), c.Subject)
	case now.Before(c.NotBefore):
		return preflight.Error("this host's clock is behind: enable time synchronisation (systemd-timesyncd, chrony); see clock-skew",
			"not valid until %s, %s from now by this host's clock", c.NotBefore.UTC().Format(time.RFC3339), c.NotBefore.Sub(now).Round(time.Second))
	case c.Subject.CommonName != "system:node:"+name || !slices.Contains(c.Subject.Organization, "system:nodes"):
		return preflight.Error("the certificate is not this node's (agent.nodeName is "+name+"); aks-flex-node reset, then aks-flex-node start",
			"subject %q, want CN=system:node:%s, O=system:nodes", c.Subject, name)
	}
	life := c.NotAfter.Sub(c.NotBefore)
	due := c.NotBefore.Add(time.Duration(float64(life) * rotationDue))
	left := c.NotAfter.Sub(now).Round(time.Minute)
	if kc := e.kubeletConfig().config; kc != nil && !kc.RotateCertificates {
		return preflight.Warning("set rotateCertificates: true in "+node.KubeletConfigFile+" (aks-flex-node start writes it so)",
			"the kubelet does not rotate its certificate (rotateCertificates is false); it expires in %s", left)
	}
	if now.After(due) {
		return preflight.Warning("the kubelet should have rotated it by "+due.UTC().Format(time.RFC3339)+": check that its CSRs are approved (kubectl get csr) and "+e.unitHint("kubelet.service")+" | grep certificate",
			"rotation is overdue: expires in %s, at %s", left, c.NotAfter.UTC().Format(time.RFC3339))
	}
	return preflight.OK("%s, expires in %s (%s), rotated by the kubelet by %s", c.Subject.CommonName, left, c.NotAfter.UTC().Format(time.RFC3339), due.UTC().Format(time.RFC3339))
}
