// Package entratest sets up what end-to-end tests need to join nodes with
// Azure identities: a fake Entra tenant (test/fakeentra) on this machine's
// end of a test link, whose tokens the control plane is told to accept;
// a managed identity served by a fake IMDS at 169.254.169.254 inside the
// link's namespace; a service principal with a secret and a certificate;
// and the config sections and cluster grants for each.
package entratest

import (
	"net"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/e2e/netlab"
	"github.com/Azure/aks-flex-node/test/fakeentra"
	"github.com/Azure/aks-flex-node/test/fakeimds"
)

// AKSServerID is the audience the kubelet's plugin asks tokens for, and
// the one the test API server accepts.
const AKSServerID = "6dae42f8-4368-4678-94ff-3960e28e3630"

// IMDSAddr is where Azure VMs reach IMDS.
const IMDSAddr = "169.254.169.254"

// SPCertPath is where a host keeps the service principal's certificate.
const SPCertPath = "/etc/aks-flex-node/sp.pem"

// Entra is the tenant and its identities.
type Entra struct {
	Tenant *fakeentra.Tenant
	// MSI is a VM's system-assigned managed identity; SP a service
	// principal with a secret and a certificate.
	MSI, SP   fakeentra.Client
	SPCertPEM []byte
	IMDS      *fakeimds.Identity
	imdsUp    bool
}

// Start serves a tenant on link's outer address until t ends.
func Start(t testing.TB, link *netlab.Link) *Entra {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(link.Outer, "0"))
	if err != nil {
		t.Fatal(err)
	}
	en := &Entra{Tenant: fakeentra.Start(t, l)}
	en.MSI = fakeentra.Client{AppID: fakeentra.NewGUID(), ObjectID: fakeentra.NewGUID()}
	cert, pemData, err := fakeentra.ClientCertificate("aks-flex-node-e2e")
	if err != nil {
		t.Fatal(err)
	}
	en.SP = fakeentra.Client{AppID: fakeentra.NewGUID(), ObjectID: fakeentra.NewGUID(), Secret: "e2e-sp-secret-" + fakeentra.NewGUID(), Cert: cert}
	en.SPCertPEM = pemData
	en.Tenant.AddClient(en.MSI)
	en.Tenant.AddClient(en.SP)
	en.IMDS = &fakeimds.Identity{Minter: en.Tenant, SystemAssigned: en.MSI.AppID}
	return en
}

// AuthenticationConfig is what the control plane is started with.
func (en *Entra) AuthenticationConfig() []byte {
	return en.Tenant.AuthenticationConfiguration(AKSServerID)
}

// ServeIMDS puts IMDS at 169.254.169.254:80 in link's namespace, once:
// until then a managed identity's token request finds no route.
func (en *Entra) ServeIMDS(t testing.TB, link *netlab.Link) {
	t.Helper()
	if en.imdsUp {
		return
	}
	ns := filepath.Base(link.NS)
	if out, err := exec.Command("ip", "-n", ns, "addr", "add", IMDSAddr+"/32", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("ip -n %s addr add %s: %v\n%s", ns, IMDSAddr, err, out)
	}
	l, err := aclhost.ListenInNetNS(link.NS, IMDSAddr+":80")
	if err != nil {
		t.Fatal(err)
	}
	fakeimds.ServeHandler(t, l, fakeimds.HandlerWithIdentity(nil, nil, en.IMDS))
	en.imdsUp = true
}

// Trust makes host h trust the tenant's CA, as a host in a private cloud
// trusts its authority's.
func (en *Entra) Trust(t testing.TB, h *aclhost.Host) {
	t.Helper()
	if err := h.WriteFile("/root/fake-entra-ca.pem", en.Tenant.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	h.ShellOK(t, "mkdir -p /etc/ssl/certs && cat /root/fake-entra-ca.pem >> /etc/ssl/certs/ca-certificates.crt && rm /root/fake-entra-ca.pem")
}

// Azure is the azure section of a config that signs in with auth: "msi",
// "sp-secret" or "sp-cert" (the certificate at SPCertPath).
func (en *Entra) Azure(auth string) map[string]any {
	switch auth {
	case "msi":
		return map[string]any{"managedIdentity": map[string]any{}}
	case "sp-secret":
		return map[string]any{"authorityHost": en.Tenant.AuthorityHost,
			"servicePrincipal": map[string]any{"tenantId": en.Tenant.ID, "clientId": en.SP.AppID, "clientSecret": en.SP.Secret}}
	case "sp-cert":
		return map[string]any{"authorityHost": en.Tenant.AuthorityHost,
			"servicePrincipal": map[string]any{"tenantId": en.Tenant.ID, "clientId": en.SP.AppID, "clientCertificatePath": SPCertPath}}
	}
	return nil
}

// ObjectID is the identity auth signs in as: its username in the cluster.
func (en *Entra) ObjectID(auth string) string {
	if auth == "msi" {
		return en.MSI.ObjectID
	}
	return en.SP.ObjectID
}
