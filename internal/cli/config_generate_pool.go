package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/identity"
	"github.com/Azure/aks-flex-node/internal/machineapi"
)

// fromPoolTransport are the HTTP clients of --from-pool's requests (to
// ARM, and to the identity's token endpoint); nil, as in the product, is
// the transport policy's client trusting the system's roots. Tests point
// them at their fakes' CAs.
var fromPoolTransport struct{ arm, entra *http.Client }

// apiVersionRE is ARM's api-version form.
var apiVersionRE = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}(-preview)?$`)

// poolDocument asks AKS for the pool's bootstrap data with the --auth
// identity and makes it the config: the pool's join data (in upstream's
// layout, which the config loads as it is) with that identity for ARM,
// so the node registers its Machine in the pool, and the host flags.
func (o *generateOptions) poolDocument(ctx context.Context) (map[string]any, error) {
	pool, err := machineapi.ParsePoolID(o.fromPool)
	if err != nil {
		return nil, invalid(fmt.Errorf("--from-pool: %w", err))
	}
	switch {
	case o.auth == "" || o.auth == "bootstrap-token":
		return nil, invalidf("--from-pool needs --auth msi, sp or arc: the Azure identity that asks AKS for pool %s's bootstrap data, and that the node registers its AKS Machine with (a bootstrap token cannot call Azure Resource Manager; the pool's data carries the kubelet's)", pool)
	case o.apiVersion != "" && !apiVersionRE.MatchString(o.apiVersion):
		return nil, invalidf("--api-version %q is not an ARM api-version such as %s (YYYY-MM-DD, optionally -preview)", o.apiVersion, machineapi.BootstrapDataAPIVersion)
	}
	azure, err := o.azure()
	if err != nil {
		return nil, err
	}
	spec, err := specOf(azure)
	if err != nil {
		return nil, err
	}
	endpoint, audience := machineapi.Endpoint(o.cloud, o.armEndpoint)
	pc, err := machineapi.NewPoolClient(pool, machineapi.Options{Endpoint: endpoint, Audience: audience, APIVersion: o.apiVersion,
		Tokens: &identity.Source{Spec: spec, Options: identity.Options{HTTPClient: fromPoolTransport.entra}}, Identity: spec.String(), HTTPClient: fromPoolTransport.arm})
	if err != nil {
		// The endpoint is the one thing New refuses here.
		return nil, invalid(fmt.Errorf("--resource-manager-endpoint (or --cloud): %w", err))
	}
	doc, err := pc.ListBootstrapData(ctx)
	if err != nil {
		return nil, fmt.Errorf("ask AKS for the bootstrap data of agent pool %s: %w", pool, err)
	}
	if err := poolAzure(doc, pool, azure, o.armEndpoint); err != nil {
		return nil, err
	}
	o.hostSections(doc)
	return doc, nil
}

// poolAzure sets the azure section of the pool's data doc: the target
// cluster and pool (the pool's own, which the data must agree with), the
// --auth identity for ARM next to the pool's bootstrap token, and the
// ARM endpoint asked.
func poolAzure(doc map[string]any, pool machineapi.PoolID, auth map[string]any, armEndpoint string) error {
	az, ok := doc["azure"].(map[string]any)
	if !ok {
		az = map[string]any{}
	}
	tc, _ := az["targetCluster"].(map[string]any)
	if tc == nil {
		tc = map[string]any{}
	}
	if got, _ := tc["resourceId"].(string); got != "" && !strings.EqualFold(got, pool.Cluster.String()) {
		return fmt.Errorf("the bootstrap data of agent pool %s names another cluster, %s (azure.targetCluster.resourceId); nothing was written", pool, got)
	}
	if got, _ := az["targetAgentPoolName"].(string); got != "" && !strings.EqualFold(got, pool.Pool) {
		return fmt.Errorf("the bootstrap data of agent pool %s names another pool, %q (azure.targetAgentPoolName); nothing was written", pool, got)
	}
	tc["resourceId"] = pool.Cluster.String()
	az["targetCluster"], az["targetAgentPoolName"] = tc, pool.Pool
	for k, v := range auth {
		az[k] = v
	}
	if armEndpoint != "" {
		az["resourceManagerEndpoint"] = strings.TrimRight(armEndpoint, "/")
	}
	doc["azure"] = az
	return nil
}

// specOf is the identity an azure section names.
func specOf(azure map[string]any) (identity.Spec, error) {
	data, err := json.Marshal(map[string]any{"azure": azure})
	if err != nil {
		return identity.Spec{}, err
	}
	var c config.Config
	if err := json.Unmarshal(data, &c); err != nil {
		return identity.Spec{}, err
	}
	spec, ok, err := identity.FromConfig(&c, identity.ReadSecretFile("/"))
	if err != nil {
		return identity.Spec{}, invalid(fmt.Errorf("--auth %s: %w", c.Azure.Method(), err))
	}
	if !ok {
		return identity.Spec{}, invalidf("--auth: no Azure identity to ask AKS with")
	}
	return spec, nil
}
