package config

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"text/template"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The value rules Validate applies, one function per kind of value. Each
// returns "" for a good value and otherwise what is wrong, for a message
// that the caller prefixes with the JSON path.

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func isAbsClean(p string) bool {
	return strings.HasPrefix(p, "/") && pathClean(p) == p
}

// dns1123Subdomain is Kubernetes' rule for names (apimachinery's), with
// each dot-separated label held to RFC 1123's 63 characters as well, which
// apimachinery's subdomain check does not count.
func dns1123Subdomain(s string) string {
	if s == "" {
		return "is empty and the hostname could not be read; set it explicitly"
	}
	if len(s) > validation.DNS1123SubdomainMaxLength {
		return "is longer than 253 characters"
	}
	bad := len(validation.IsDNS1123Subdomain(s)) > 0
	for _, l := range strings.Split(s, ".") {
		bad = bad || len(validation.IsDNS1123Label(l)) > 0
	}
	if bad {
		return "is not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', starting and ending with an alphanumeric)"
	}
	return ""
}

// labelKey is a label or taint key: [prefix/]name, the prefix a DNS-1123
// subdomain, the name a qualified name (apimachinery's rule).
func labelKey(k string) string {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	} else if msg := dns1123Subdomain(prefix); msg != "" || prefix == "" {
		return fmt.Sprintf("prefix %q is not a DNS-1123 subdomain", prefix)
	}
	// A second '/' would make IsQualifiedName read name as prefix/name.
	if strings.Contains(name, "/") || len(validation.IsQualifiedName(name)) > 0 {
		return fmt.Sprintf("name %q must be 1-63 characters of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric", name)
	}
	return ""
}

// labelValue is a label or taint value (apimachinery's rule; empty is
// allowed).
func labelValue(v string) string {
	if len(validation.IsValidLabelValue(v)) > 0 {
		return "must be at most 63 characters of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
	}
	return ""
}

func taint(t string) string {
	kv, effect, ok := strings.Cut(t, ":")
	if !ok {
		return "must be key[=value]:Effect"
	}
	if !contains([]string{"NoSchedule", "PreferNoSchedule", "NoExecute"}, effect) {
		return fmt.Sprintf("effect %q must be NoSchedule, PreferNoSchedule or NoExecute", effect)
	}
	key, value, _ := strings.Cut(kv, "=")
	if msg := labelKey(key); msg != "" {
		return "key " + msg
	}
	if msg := labelValue(value); msg != "" {
		return "value " + msg
	}
	return ""
}

// imageRef is a light syntax check of a container image reference; the
// registry client does the full parse when the image is pulled.
func imageRef(s string) string {
	if s == "" {
		return "is empty"
	}
	if strings.ContainsAny(s, " \t\n\"'\\") || strings.Contains(s, "://") {
		return "is not an image reference such as registry/repository:tag"
	}
	return ""
}

// ParseOCILayoutRef splits oci-layout:///dir:tag (or @sha256:...) into its
// directory and reference.
func ParseOCILayoutRef(s string) (dir, ref string, err error) {
	rest := strings.TrimPrefix(s, "oci-layout://")
	if !strings.HasPrefix(rest, "/") {
		return "", "", fmt.Errorf("%q: the directory of an oci-layout:// reference must be absolute (oci-layout:///dir:tag)", s)
	}
	if i := strings.LastIndex(rest, "@"); i > 0 {
		return rest[:i], rest[i+1:], nil
	}
	i := strings.LastIndex(rest, ":")
	if i <= 0 || i == len(rest)-1 || strings.Contains(rest[i:], "/") {
		return "", "", fmt.Errorf("%q: missing tag; want oci-layout:///dir:tag", s)
	}
	return rest[:i], rest[i+1:], nil
}

func artifactSource(s string) string {
	if _, err := template.New("source").Option("missingkey=error").Parse(s); err != nil {
		return "is not a valid template: " + err.Error()
	}
	switch {
	case strings.HasPrefix(s, "/"):
	case strings.HasPrefix(s, "file:///"):
	case strings.HasPrefix(s, "oci://") && len(s) > len("oci://"):
	default:
		return "must be an absolute path, file:///path or oci://registry/repository:tag"
	}
	return ""
}

// ServerURL turns node.kubelet.clusterFQDN into the API server URL:
// host -> https://host:443, host:port -> https://host:port. An https:// URL
// is accepted as long as it carries nothing but a host and port.
func ServerURL(s string) (string, error) {
	raw := s
	if !strings.Contains(s, "://") {
		raw = "https://" + s
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%q is not a host name, host:port or https URL", s)
	}
	switch {
	case u.Scheme != "https":
		return "", fmt.Errorf("%q must use https", s)
	case u.User != nil:
		return "", fmt.Errorf("%q must not carry user info", s)
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		return "", fmt.Errorf("%q must not have a path, query or fragment", s)
	case u.Hostname() == "":
		return "", fmt.Errorf("%q has no host", s)
	}
	port := u.Port()
	if port == "" {
		port = "443"
	} else if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("%q has an invalid port", s)
	}
	return "https://" + net.JoinHostPort(u.Hostname(), port), nil
}

// DecodeCACerts decodes caCertData: base64 of one or more PEM certificates.
func DecodeCACerts(s string) ([]*x509.Certificate, error) {
	data, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("is not valid base64: %v", err)
	}
	var certs []*x509.Certificate
	for len(data) > 0 {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d does not parse: %v", len(certs)+1, err)
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("holds no PEM certificate (want base64 of a PEM bundle)")
	}
	return certs, nil
}

// CAPEM returns node.kubelet.caCertData decoded: the PEM bundle. Validation
// has already proven it decodes; an unset value yields nil.
func (c *Config) CAPEM() []byte {
	data, _ := base64.StdEncoding.DecodeString(strings.TrimSpace(c.Node.Kubelet.CACertData))
	return data
}

// authorityHost is a Microsoft Entra authority host: an https URL with a
// host and nothing but an optional path (the tenant is appended to it).
func authorityHost(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Scheme != "https" || u.Host == "":
		return "must be an https URL such as https://login.microsoftonline.us/"
	case u.User != nil, u.RawQuery != "", u.Fragment != "":
		return "must not carry user info, a query or a fragment"
	}
	return ""
}
