// Package clusterprep owns what a cluster must grant before a node joins
// it: the objects `aks-flex-node cluster prepare` prints for an admin to
// apply with kubectl (a bootstrap token Secret and the bindings that let
// its kubelet bootstrap and have its client certificate approved, and
// its agent read the Nodes for the routes between pod networks, and its
// kube-proxy read the Services; for an Entra identity the same, the
// identity taking the token's place in the TLS bootstrap and granted
// nothing else), and the permissions
// preflight's cluster-access check asks the API server about, which are
// the same facts seen from the node.
package clusterprep

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"math/big"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// BootstrapGroup is the extra group of the bootstrap tokens cluster
// prepare makes; its bindings name this group, so they grant nothing to
// tokens made for other purposes.
const BootstrapGroup = "system:bootstrappers:aks-flex-node"

// The roles the bindings grant: Kubernetes' own (bootstrap policy), kept
// current by the API server.
const (
	nodeBootstrapperRole = "system:node-bootstrapper"
	nodeClientRole       = "system:certificates.k8s.io:certificatesigningrequests:nodeclient"
	selfNodeClientRole   = "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"
	nodeProxierRole      = "system:node-proxier"
)

// NodeProxierBinding is the binding that lets the nodes run kube-proxy
// with their own credentials, as the agent's kube-proxy does
// (networking.kubeProxy agent): Kubernetes' system:node-proxier role
// (read Services, EndpointSlices, Nodes; write Events). The Node
// authorizer and the system:node role let a node read Services but not
// EndpointSlices. It grants nothing a kube-proxy DaemonSet's account does
// not already have, so cluster prepare prints it whatever the nodes'
// networking.kubeProxy.
const NodeProxierBinding = "aks-flex-node:node-proxier"

// Permission is one thing the node's credential must be allowed to do,
// as a SelfSubjectAccessReview asks it.
type Permission struct {
	Verb, Group, Resource, Subresource, Namespace string
}

// String is how messages name it: "patch nodes/status",
// "update leases.coordination.k8s.io in kube-node-lease".
func (p Permission) String() string {
	r := p.Resource
	if p.Group != "" {
		r += "." + p.Group
	}
	if p.Subresource != "" {
		r += "/" + p.Subresource
	}
	s := p.Verb + " " + r
	if p.Namespace != "" {
		s += " in " + p.Namespace
	}
	return s
}

// BootstrapTokenPermissions are what a bootstrap token needs for a TLS
// bootstrap without a human: create its CSR and watch it, and have it
// approved (the CSR approver asks whether the requester may create
// certificatesigningrequests/nodeclient).
var BootstrapTokenPermissions = []Permission{
	{Verb: "create", Group: "certificates.k8s.io", Resource: "certificatesigningrequests"},
	{Verb: "watch", Group: "certificates.k8s.io", Resource: "certificatesigningrequests"},
	{Verb: "create", Group: "certificates.k8s.io", Resource: "certificatesigningrequests", Subresource: "nodeclient"},
}

// IdentityPermissions are what an Entra identity needs for the kubelet's
// TLS bootstrap, and all it is granted: the bootstrap token's.
var IdentityPermissions = BootstrapTokenPermissions

// BeyondBootstrap are things a bootstrap credential must not be allowed:
// what one compromised host would do with a credential the Node
// authorizer does not bound (issue 26: read a kube-system Secret, mint a
// token for a kube-system ServiceAccount, run a pod in kube-system,
// rewrite a Node's status or put a taint on it). An identity allowed any
// of them was bound more than cluster prepare grants, such as the
// system:node role an earlier version bound it to.
var BeyondBootstrap = []Permission{
	{Verb: "get", Resource: "secrets", Namespace: "kube-system"},
	{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: "kube-system"},
	{Verb: "create", Resource: "pods", Namespace: "kube-system"},
	{Verb: "patch", Resource: "nodes", Subresource: "status"},
	{Verb: "patch", Resource: "nodes"},
}

// BootstrapToken is a token in the id.secret form.
type BootstrapToken struct{ ID, Secret string }

func (t BootstrapToken) String() string { return t.ID + "." + t.Secret }

const tokenChars = "abcdefghijklmnopqrstuvwxyz0123456789"

// NewBootstrapToken makes a random token: 6 and 16 of [a-z0-9].
func NewBootstrapToken() (BootstrapToken, error) {
	pick := func(n int) (string, error) {
		b := make([]byte, n)
		for i := range b {
			v, err := rand.Int(rand.Reader, big.NewInt(int64(len(tokenChars))))
			if err != nil {
				return "", err
			}
			b[i] = tokenChars[v.Int64()]
		}
		return string(b), nil
	}
	id, err := pick(6)
	if err != nil {
		return BootstrapToken{}, err
	}
	secret, err := pick(16)
	return BootstrapToken{ID: id, Secret: secret}, err
}

// ParseBootstrapToken reads a token; errors never echo the secret.
func ParseBootstrapToken(s string) (BootstrapToken, error) {
	id, secret, ok := strings.Cut(strings.TrimSpace(s), ".")
	valid := func(v string, n int) bool {
		return len(v) == n && strings.Trim(v, tokenChars) == ""
	}
	if !ok || !valid(id, 6) || !valid(secret, 16) {
		return BootstrapToken{}, fmt.Errorf("not a bootstrap token: want <6 lowercase alphanumerics>.<16 lowercase alphanumerics>")
	}
	return BootstrapToken{ID: id, Secret: secret}, nil
}

// BootstrapTokenObjects are the Secret of token t, valid until expires,
// and the bindings that let its kubelet bootstrap: create CSRs, have its
// client CSR approved, and later renew its own certificate.
func BootstrapTokenObjects(t BootstrapToken, expires time.Time) []any {
	secret := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + t.ID, Namespace: metav1.NamespaceSystem},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"description":                    "aks-flex-node bootstrap token (aks-flex-node cluster prepare)",
			"token-id":                       t.ID,
			"token-secret":                   t.Secret,
			"expiration":                     expires.UTC().Format(time.RFC3339),
			"usage-bootstrap-authentication": "true",
			"usage-bootstrap-signing":        "true",
			"auth-extra-groups":              BootstrapGroup,
		},
	}
	return append([]any{
		secret,
		binding("aks-flex-node:kubelet-bootstrap", nodeBootstrapperRole, group(BootstrapGroup)),
		binding("aks-flex-node:node-autoapprove-bootstrap", nodeClientRole, group(BootstrapGroup)),
	}, nodeObjects()...)
}

// nodeObjects are what every node, as system:node:<name> in system:nodes,
// is granted beyond what the Node authorizer gives it, whatever it
// bootstrapped with: renewing its own client certificate, reading the
// Nodes, running kube-proxy. Both kinds of cluster prepare print them,
// under the same names, so applying both changes nothing.
func nodeObjects() []any {
	return []any{
		binding("aks-flex-node:node-autoapprove-certificate-rotation", selfNodeClientRole, group("system:nodes")),
		nodeReaderRole(),
		binding(NodeReaderRole, NodeReaderRole, group("system:nodes")),
		binding(NodeProxierBinding, nodeProxierRole, group("system:nodes")),
	}
}

// NodeReaderRole lets the nodes read the Nodes: a bridge-mode node's agent
// routes to every other Node's pod CIDR via its InternalIP, from a watch on
// the Nodes with the node's own credential. The Node authorizer lets a
// node with a certificate read only its own Node (AuthorizeNodeWithSelectors,
// as the e2e's 1.35 API server does), and leaves the rest to RBAC; this
// role is that rest. It reads Nodes only, what every node could read
// before that change.
const NodeReaderRole = "aks-flex-node:node-reader"

// NodeReaderPermissions are what the agent's keep-pod-routes loop does.
var NodeReaderPermissions = []Permission{
	{Verb: "list", Resource: "nodes"},
	{Verb: "watch", Resource: "nodes"},
}

func nodeReaderRole() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: NodeReaderRole, Labels: map[string]string{"app.kubernetes.io/managed-by": "aks-flex-node"}},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}}},
	}
}

// IdentityObjects are the bindings that let the Entra identity with
// object ID objectID (its username, by the cluster's claim mapping)
// bootstrap a kubelet, and nothing more: create and watch the CSR for the
// node's client certificate (system:node-bootstrapper), and have the
// controller-manager's csrapproving controller approve it (it asks
// whether the requester may create certificatesigningrequests/nodeclient).
// The kubelet and the agent then sign in with that certificate as
// system:node:<name> in system:nodes, which the Node authorizer and
// NodeRestriction bound, and renew it as that node (nodeObjects). The
// identity is never bound to the system:node role: the Node authorizer
// narrows that role only for users named system:node:<name>, and for any
// other user it grants its rules cluster-wide.
//
// Like a bootstrap token, the identity may ask for a certificate for any
// node name: what it bootstraps is a node, not a particular one.
func IdentityObjects(objectID string) []any {
	user := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: objectID}}
	return append([]any{
		binding("aks-flex-node:identity-bootstrap:"+objectID, nodeBootstrapperRole, user),
		binding("aks-flex-node:identity-autoapprove:"+objectID, nodeClientRole, user),
	}, nodeObjects()...)
}

func group(name string) []rbacv1.Subject {
	return []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: name}}
}

func binding(name, role string, subjects []rbacv1.Subject) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/managed-by": "aks-flex-node"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   subjects,
	}
}

// Render writes objs as one YAML stream, after a comment header.
func Render(header string, objs []any) ([]byte, error) {
	var b bytes.Buffer
	for _, l := range strings.Split(strings.TrimSpace(header), "\n") {
		b.WriteString("# " + l + "\n")
	}
	for _, o := range objs {
		data, err := yaml.Marshal(o)
		if err != nil {
			// The objects hold a token; the encoder's error could quote it.
			return nil, fmt.Errorf("encode %T failed", o)
		}
		b.WriteString("---\n")
		b.Write(stripNullCreation(data))
	}
	return b.Bytes(), nil
}

// stripNullCreation drops the "creationTimestamp: null" every typed object
// marshals: noise in a file an admin reads.
func stripNullCreation(data []byte) []byte {
	return bytes.ReplaceAll(data, []byte("  creationTimestamp: null\n"), nil)
}
