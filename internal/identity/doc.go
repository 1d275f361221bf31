// Package identity owns the node's Microsoft Entra credentials: which
// identity the config names (a managed identity through IMDS, a service
// principal with a secret or a certificate, the Azure Arc agent's
// identity), how a token is obtained for it (azidentity), the token cache
// in the state dir, the exec credential the kubelet's kubeconfig runs
// (client.authentication.k8s.io/v1), the identity dir a machine's plugin
// reads, and how a failure is told (the tenant, client and endpoint, and
// the identity platform's own AADSTS error).
//
// Secrets (a client secret, a certificate's key, a token) never appear in
// an error or a log line made here.
package identity
