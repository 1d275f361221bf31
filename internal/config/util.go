package config

import (
	"fmt"
	"net"
	"path"
	"sort"
	"strconv"
)

func pathClean(p string) string { return path.Clean(p) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// MetricsListenAddress checks agent.metricsAddress and returns the
// address to listen on: host:port with a numeric port, the host an IP
// address, "localhost" or empty, which means 127.0.0.1 (loopback unless
// another address is written out).
func MetricsListenAddress(s string) (string, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", fmt.Errorf("%q is not host:port (such as 127.0.0.1:9464, or :9464 for loopback)", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%q: port %q is not a number from 1 to 65535", s, port)
	}
	switch {
	case host == "":
		host = "127.0.0.1"
	case host == "localhost":
	case net.ParseIP(host) == nil:
		return "", fmt.Errorf("%q: host %q is not an IP address or localhost", s, host)
	}
	return net.JoinHostPort(host, port), nil
}
