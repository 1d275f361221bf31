package identity

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// ExecInfoEnv is the variable client-go passes an exec credential plugin
// its ExecCredential request in.
const ExecInfoEnv = "KUBERNETES_EXEC_INFO"

// ExecAPIVersion is the exec credential API this plugin speaks; the
// kubelet's kubeconfig asks for it.
const ExecAPIVersion = "client.authentication.k8s.io/v1"

// execCredential is client.authentication.k8s.io/v1 ExecCredential, as
// much of it as a token plugin reads and writes.
type execCredential struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Spec       json.RawMessage `json:"spec,omitempty"`
	Status     *execStatus     `json:"status,omitempty"`
}

type execStatus struct {
	ExpirationTimestamp string `json:"expirationTimestamp"`
	Token               string `json:"token"`
}

// CheckExecInfo reads the request client-go passed in KUBERNETES_EXEC_INFO
// (empty when the plugin runs by hand, which is allowed) and refuses an
// API version this plugin does not answer: client-go would reject the
// answer in another version anyway, less clearly.
func CheckExecInfo(info string) error {
	if info == "" {
		return nil
	}
	var req execCredential
	if err := json.Unmarshal([]byte(info), &req); err != nil {
		return fmt.Errorf("%s does not hold an ExecCredential: %v", ExecInfoEnv, err)
	}
	if req.Kind != "ExecCredential" || req.APIVersion != ExecAPIVersion {
		return fmt.Errorf("%s asks for %s %s; this plugin answers %s ExecCredential (set apiVersion: %s in the kubeconfig's exec section)", ExecInfoEnv, req.APIVersion, req.Kind, ExecAPIVersion, ExecAPIVersion)
	}
	return nil
}

// WriteExecCredential writes the ExecCredential that hands t to client-go.
// Its expiration is t's RefreshAt, not the token's own expiry, so the
// client asks again when a new token is due, while the one it holds is
// still valid.
func WriteExecCredential(w io.Writer, t Token) error {
	ec := execCredential{
		APIVersion: ExecAPIVersion,
		Kind:       "ExecCredential",
		Spec:       json.RawMessage(`{"interactive":false}`),
		Status: &execStatus{
			ExpirationTimestamp: t.RefreshAt().UTC().Format(time.RFC3339),
			Token:               t.AccessToken,
		},
	}
	data, err := json.Marshal(ec)
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}
