package controlplane

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
)

// BootstrapGroup is the extra group the harness's bootstrap token carries,
// as kubeadm's tokens carry system:bootstrappers:kubeadm:default-node-token.
const BootstrapGroup = "system:bootstrappers:aks-flex-node"

// The objects below are part of what `kubeadm init` creates in its
// bootstrap-token phase, under kubeadm's names: the token and the signed
// cluster-info for discovery. The bindings that let a token's kubelet
// bootstrap are not created: a cluster has them only when an admin
// granted them, which the tests do with `aks-flex-node cluster prepare`
// and kubectl, as users do.
const clusterInfoRole = "kubeadm:bootstrap-signer-clusterinfo"

// newBootstrapToken returns a token in the id.secret form.
func newBootstrapToken() (id, secret string, err error) {
	token, err := bootstraputil.GenerateBootstrapToken()
	if err != nil {
		return "", "", err
	}
	m := bootstraputil.BootstrapTokenRegexp.FindStringSubmatch(token)
	if len(m) != 3 {
		return "", "", fmt.Errorf("generated bootstrap token %q does not match %s", token, bootstrapapi.BootstrapTokenPattern)
	}
	return m[1], m[2], nil
}

// clusterInfoKubeconfig is the kubeconfig kubeadm publishes in cluster-info:
// one cluster with an empty name, the server and the CA, nothing else.
func clusterInfoKubeconfig(server string, caPEM []byte) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[""] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	return clientcmd.Write(*cfg)
}

func bootstrapObjects(tokenID, tokenSecret, server string, caPEM []byte, ttl time.Duration) ([]func(context.Context, kubernetes.Interface) error, error) {
	kubeconfig, err := clusterInfoKubeconfig(server, caPEM)
	if err != nil {
		return nil, fmt.Errorf("cluster-info kubeconfig: %w", err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      bootstrapapi.BootstrapTokenSecretPrefix + tokenID,
			Namespace: metav1.NamespaceSystem,
		},
		Type: bootstrapapi.SecretTypeBootstrapToken,
		StringData: map[string]string{
			bootstrapapi.BootstrapTokenIDKey:               tokenID,
			bootstrapapi.BootstrapTokenSecretKey:           tokenSecret,
			bootstrapapi.BootstrapTokenDescriptionKey:      "aks-flex-node end-to-end test token",
			bootstrapapi.BootstrapTokenExpirationKey:       time.Now().Add(ttl).UTC().Format(time.RFC3339),
			bootstrapapi.BootstrapTokenUsageAuthentication: "true",
			bootstrapapi.BootstrapTokenUsageSigningKey:     "true",
			bootstrapapi.BootstrapTokenExtraGroupsKey:      BootstrapGroup,
		},
	}
	clusterInfo := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: bootstrapapi.ConfigMapClusterInfo, Namespace: metav1.NamespacePublic},
		Data:       map[string]string{bootstrapapi.KubeConfigKey: string(kubeconfig)},
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: clusterInfoRole, Namespace: metav1.NamespacePublic},
		Rules: []rbacv1.PolicyRule{{
			APIGroups:     []string{""},
			Resources:     []string{"configmaps"},
			ResourceNames: []string{bootstrapapi.ConfigMapClusterInfo},
			Verbs:         []string{"get"},
		}},
	}
	roleBinding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: clusterInfoRole, Namespace: metav1.NamespacePublic},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: clusterInfoRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "system:anonymous"}},
	}

	steps := []func(context.Context, kubernetes.Interface) error{
		func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets(secret.Namespace).Create(ctx, secret, metav1.CreateOptions{})
			return named("secret "+secret.Namespace+"/"+secret.Name, err)
		},
	}
	steps = append(steps,
		func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().ConfigMaps(clusterInfo.Namespace).Create(ctx, clusterInfo, metav1.CreateOptions{})
			return named("configmap "+clusterInfo.Namespace+"/"+clusterInfo.Name, err)
		},
		func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.RbacV1().Roles(role.Namespace).Create(ctx, role, metav1.CreateOptions{})
			return named("role "+role.Namespace+"/"+role.Name, err)
		},
		func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.RbacV1().RoleBindings(roleBinding.Namespace).Create(ctx, roleBinding, metav1.CreateOptions{})
			return named("rolebinding "+roleBinding.Namespace+"/"+roleBinding.Name, err)
		},
	)
	return steps, nil
}

// named treats AlreadyExists as done, so a retried step is idempotent.
func named(what string, err error) error {
	if err == nil || apierrors.IsAlreadyExists(err) {
		return nil
	}
	return fmt.Errorf("create %s: %w", what, err)
}

// createBootstrapObjects runs each step until it succeeds. Right after
// /readyz the system namespaces may not exist yet, so NotFound is retried.
func createBootstrapObjects(ctx context.Context, c kubernetes.Interface, steps []func(context.Context, kubernetes.Interface) error) error {
	for _, step := range steps {
		for {
			err := step(ctx, c)
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w (context: %v)", err, ctx.Err())
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}
