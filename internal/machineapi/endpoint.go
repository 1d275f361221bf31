package machineapi

import (
	"net/url"
	"strings"
)

// The ARM endpoints and token audiences of the clouds azure.cloud names.
// The audience of a cloud's endpoint is its management.core resource, as
// upstream's rule has it; any other endpoint is its own audience.
var clouds = map[string]struct{ endpoint, audience string }{
	"AzurePublicCloud":       {"https://management.azure.com", "https://management.core.windows.net/"},
	"AzureUSGovernmentCloud": {"https://management.usgovcloudapi.net", "https://management.core.usgovcloudapi.net/"},
	"AzureChinaCloud":        {"https://management.chinacloudapi.cn", "https://management.core.chinacloudapi.cn/"},
}

// Endpoint is the ARM endpoint to call and the audience of its tokens:
// azure.resourceManagerEndpoint when set (with its cloud's audience when
// it is a known cloud's endpoint, else itself), else azure.cloud's.
func Endpoint(cloud, configured string) (endpoint, audience string) {
	configured = strings.TrimRight(configured, "/")
	if configured == "" {
		c, ok := clouds[cloud]
		if !ok {
			c = clouds["AzurePublicCloud"]
		}
		return c.endpoint, c.audience
	}
	u, err := url.Parse(configured)
	if err == nil {
		for _, c := range clouds {
			if cu, _ := url.Parse(c.endpoint); strings.EqualFold(cu.Host, u.Host) {
				return configured, c.audience
			}
		}
	}
	return configured, configured + "/"
}
