package supportbundle

import "testing"

// Each form a secret takes in a host's files and logs is redacted; what
// diagnoses a problem (names, IDs, certificates, paths) stays.
func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"token": "abcdef.0123456789abcdef"}`, `{"token": "REDACTED"}`},
		{`kubelet --bootstrap-token=abcdef.0123456789abcdef`, `kubelet --bootstrap-token=REDACTED`},
		{`joining with token abcdef.0123456789abcdef`, `joining with token abcdef.REDACTED`},
		{`"clientSecret":"s3cr3t-value"`, `"clientSecret":"REDACTED"`},
		{"    client-key-data: LS0tLS1CRUdJTg==\n    client-certificate-data: Q0VSVA==", "    client-key-data: REDACTED\n    client-certificate-data: Q0VSVA=="},
		{`Authorization: Bearer abc.def-ghi`, `Authorization: Bearer REDACTED`},
		{`id_token eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln end`, `id_token REDACTED end`},
		{"-----BEGIN PRIVATE KEY-----\nMIIE\nabc\n-----END PRIVATE KEY-----", "-----BEGIN PRIVATE KEY-----\nREDACTED\n-----END PRIVATE KEY-----"},
		{"password=hunter22", "password=REDACTED"},
		{`"bootstrapToken": {"token": "x"}`, `"bootstrapToken": {"token": "REDACTED"}`},
		{`{"token": ""}`, `{"token": ""}`},
		{"-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----", "-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----"},
		{"node node-1 Ready in machine kube1, image sha256:abc", "node node-1 Ready in machine kube1, image sha256:abc"},
		{`"url":"https://blob.test/c/aks-flex-node?sv=2024-05-04&sig=AbC%2Bd3f&se=x"`, `"url":"https://blob.test/c/aks-flex-node?sv=2024-05-04&sig=REDACTED&se=x"`},
		{`"artifacts":"https://user:pa55word@bundles.test/b.tar"`, `"artifacts":"https://user:REDACTED@bundles.test/b.tar"`},
		{"oci://registry.test:5000/bundle:v1 and registry.test/worker@sha256:ab12", "oci://registry.test:5000/bundle:v1 and registry.test/worker@sha256:ab12"},
	} {
		if got := string(newRedactor(nil).redact([]byte(tc.in))); got != tc.want {
			t.Errorf("redact(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
	r := newRedactor([]string{"odd-secret-FORMAT", "abc"})
	if got := string(r.redact([]byte("x odd-secret-FORMAT y abc"))); got != "x REDACTED y abc" || r.count != 1 {
		t.Errorf("literal: %q (count %d); a literal under 6 bytes must not be redacted", got, r.count)
	}
}
