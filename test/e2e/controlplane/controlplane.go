// Package controlplane runs a real, local Kubernetes control plane for
// end-to-end tests: embedded etcd, kube-apiserver, kube-controller-manager
// and kube-scheduler built from the Go module proxy by ../build-k8s.sh, with a
// PKI generated here and the objects kubeadm creates for TLS bootstrap with a
// bootstrap token. It owns the processes it starts and their work directory.
package controlplane

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// PodCIDR is the cluster CIDR the controller-manager allocates node pod
// ranges from.
const PodCIDR = "10.244.0.0/16"

// Options configures Start.
type Options struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager and
	// kube-scheduler (see FindBinDir). Required.
	BinDir string
	// WorkDir receives the PKI, kubeconfigs, etcd data and logs. Required;
	// it is created if missing and left in place by Stop.
	WorkDir string
	// BindAddress is where kube-apiserver listens: AdvertiseAddress when
	// that is set, else 127.0.0.1. Set it only to widen the listener to
	// 0.0.0.0 or ::.
	BindAddress string
	// AdvertiseAddress, when set, is the address nodes reach the apiserver
	// at: it is added to the serving certificate, passed as
	// --advertise-address and used in Server and cluster-info. Without it
	// everything is loopback, and the `kubernetes` Service has no endpoints
	// (the apiserver refuses loopback endpoint addresses), which only
	// matters to pods that talk to the apiserver through that Service.
	AdvertiseAddress string
	// ReadyTimeout bounds the whole start. Default 3 minutes.
	ReadyTimeout time.Duration
	// TokenTTL is the bootstrap token's lifetime. Default 24 hours.
	TokenTTL time.Duration
	// Logf receives progress and timing lines. Default log.Printf.
	Logf func(format string, args ...any)
	// FailureLog receives the tail of every component log when Start fails.
	// Default os.Stderr.
	FailureLog io.Writer
	// AuthenticationConfig, when set, is the kube-apiserver's structured
	// AuthenticationConfiguration (--authentication-config): how tests
	// make the API server trust a fake Entra tenant's tokens.
	AuthenticationConfig []byte
	// PodCIDR is the cluster CIDR the controller-manager allocates each
	// Node a /24 of. Default PodCIDR (256 Nodes); the fleet simulator's
	// thousands of Nodes need a wider one.
	PodCIDR string
	// SigningDuration, when set, is how long the certificates the
	// controller-manager signs for CSRs are valid
	// (--cluster-signing-duration): short, a test sees the kubelets renew
	// their client certificates. Default one year.
	SigningDuration time.Duration
	// AuditPolicy, when set, is the kube-apiserver's audit policy; the
	// log (JSON lines) is AuditLog: how a benchmark counts who asked what.
	AuditPolicy []byte
}

// Timings records how long each stage of Start took.
type Timings struct {
	PKI               time.Duration
	Etcd              time.Duration // start until etcd is healthy
	APIServer         time.Duration // start until /readyz is ok
	Bootstrap         time.Duration // token, RBAC, cluster-info
	ControllerManager time.Duration // until its /healthz is ok
	Scheduler         time.Duration // until its /healthz is ok
	Total             time.Duration
}

// ControlPlane is a running control plane. Stop it when done.
type ControlPlane struct {
	// Server is the URL nodes use: the advertise address if one was given,
	// else the local address. LocalServer is what the harness itself uses.
	Server      string
	LocalServer string
	// CAPEM is the cluster CA certificate; CAFile and CAKeyFile are its
	// files (the controller-manager signs node certificates with them).
	CAPEM     []byte
	CAFile    string
	CAKeyFile string
	// Token is the bootstrap token, "<TokenID>.<TokenSecret>".
	Token       string
	TokenID     string
	TokenSecret string
	// AdminKubeconfig is a kubeconfig file for a system:masters user.
	AdminKubeconfig string
	// AdminConfig and Client are authenticated the same way.
	AdminConfig *rest.Config
	Client      *kubernetes.Clientset
	WorkDir     string
	LogsDir     string
	AuditLog    string // the audit log's path, when Options.AuditPolicy is set
	Timings     Timings

	binDir   string
	procs    []*process // in start order
	stopOnce sync.Once
	stopErr  error
}

// Start brings up etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler, waits until each is healthy and creates the bootstrap
// token and the objects a node needs to join with it. On error everything
// started is stopped and the component logs are written to FailureLog.
func Start(ctx context.Context, opts Options) (cp *ControlPlane, err error) {
	begin := time.Now()
	if err := opts.defaults(); err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, opts.ReadyTimeout)
	defer cancel()

	c := &ControlPlane{WorkDir: opts.WorkDir, LogsDir: filepath.Join(opts.WorkDir, "logs"), binDir: opts.BinDir}
	defer func() {
		if err != nil {
			c.DumpLogs(opts.FailureLog)
			if stopErr := c.Stop(); stopErr != nil {
				opts.Logf("controlplane: stop after failed start: %v", stopErr)
			}
			cp, err = nil, fmt.Errorf("controlplane: %w (logs in %s)", err, c.LogsDir)
		}
	}()
	if err := c.startOnFreePorts(ctx, &opts); err != nil {
		return c, err
	}
	c.Timings.Total = time.Since(begin)
	opts.Logf("controlplane: ready in %s (pki %s, etcd %s, kube-apiserver %s, bootstrap objects %s, kube-controller-manager %s, kube-scheduler %s); server %s, work dir %s",
		c.Timings.Total.Round(time.Millisecond), c.Timings.PKI.Round(time.Millisecond), c.Timings.Etcd.Round(time.Millisecond),
		c.Timings.APIServer.Round(time.Millisecond), c.Timings.Bootstrap.Round(time.Millisecond),
		c.Timings.ControllerManager.Round(time.Millisecond), c.Timings.Scheduler.Round(time.Millisecond), c.Server, c.WorkDir)
	return c, nil
}

func (o *Options) defaults() error {
	if o.BinDir == "" {
		return errors.New("Options.BinDir is required (see FindBinDir)")
	}
	if o.WorkDir == "" {
		return errors.New("Options.WorkDir is required")
	}
	var advertise net.IP
	if o.AdvertiseAddress != "" {
		if advertise = net.ParseIP(o.AdvertiseAddress); advertise == nil {
			return fmt.Errorf("Options.AdvertiseAddress %q is not an IP address", o.AdvertiseAddress)
		}
	}
	if o.BindAddress == "" {
		o.BindAddress = "127.0.0.1"
		if advertise != nil {
			o.BindAddress = o.AdvertiseAddress
		}
	}
	bind := net.ParseIP(o.BindAddress)
	if bind == nil {
		return fmt.Errorf("Options.BindAddress %q is not an IP address", o.BindAddress)
	}
	// Nodes are told to dial the advertise address; a listener elsewhere
	// would make every join fail with a refused connection.
	if advertise != nil && !bind.IsUnspecified() && !bind.Equal(advertise) {
		return fmt.Errorf("Options.BindAddress %s does not cover Options.AdvertiseAddress %s: leave it empty, or use 0.0.0.0 or ::", o.BindAddress, o.AdvertiseAddress)
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 3 * time.Minute
	}
	if o.TokenTTL == 0 {
		o.TokenTTL = 24 * time.Hour
	}
	if o.Logf == nil {
		o.Logf = log.Printf
	}
	if o.FailureLog == nil {
		o.FailureLog = os.Stderr
	}
	return nil
}

// startPlan is what start decides before it runs anything: ports,
// addresses, the PKI and the components' kubeconfigs.
type startPlan struct {
	advertise                             string // the address nodes dial
	apiPort, etcdClientPort, etcdPeerPort int
	kcmPort, schedPort                    int
	pki                                   *pki
	kcmKubeconfig, schedKubeconfig        string
}

func (pl *startPlan) etcdURL() string { return "http://127.0.0.1:" + strconv.Itoa(pl.etcdClientPort) }

func (c *ControlPlane) start(ctx context.Context, opts *Options) error {
	pl, err := c.plan(opts)
	if err != nil {
		return err
	}
	if err := c.startEtcd(ctx, opts, pl); err != nil {
		return err
	}
	if err := c.startAPIServer(ctx, opts, pl); err != nil {
		return err
	}
	// Bootstrap token and RBAC before the controller-manager starts, so its
	// bootstrapsigner signs cluster-info on its first pass.
	t := time.Now()
	if c.TokenID, c.TokenSecret, err = newBootstrapToken(); err != nil {
		return fmt.Errorf("bootstrap token: %w", err)
	}
	c.Token = c.TokenID + "." + c.TokenSecret
	steps, err := bootstrapObjects(c.TokenID, c.TokenSecret, c.Server, c.CAPEM, opts.TokenTTL)
	if err != nil {
		return err
	}
	if err := createBootstrapObjects(ctx, c.Client, steps); err != nil {
		return fmt.Errorf("bootstrap objects: %w", err)
	}
	c.Timings.Bootstrap = time.Since(t)
	return c.startControllers(ctx, opts, pl)
}

// plan picks ports and addresses, writes the PKI and the kubeconfigs, and
// makes the admin client. Nothing runs yet: a failure here leaves no
// process behind.
func (c *ControlPlane) plan(opts *Options) (*startPlan, error) {
	for _, d := range []string{c.WorkDir, c.LogsDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	// The local address is loopback when the apiserver listens everywhere.
	localHost := opts.BindAddress
	if ip := net.ParseIP(localHost); ip.IsUnspecified() {
		localHost = "127.0.0.1"
	}
	pl := &startPlan{advertise: opts.AdvertiseAddress}
	if pl.advertise == "" {
		pl.advertise = localHost
	}
	ports, err := freePorts(localHost, "127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1")
	if err != nil {
		return nil, fmt.Errorf("choose ports: %w", err)
	}
	pl.apiPort, pl.etcdClientPort, pl.etcdPeerPort, pl.kcmPort, pl.schedPort = ports[0], ports[1], ports[2], ports[3], ports[4]
	c.LocalServer = "https://" + net.JoinHostPort(localHost, strconv.Itoa(pl.apiPort))
	c.Server = "https://" + net.JoinHostPort(pl.advertise, strconv.Itoa(pl.apiPort))

	t := time.Now()
	if pl.pki, err = newPKI(filepath.Join(c.WorkDir, "pki"), net.ParseIP(opts.AdvertiseAddress)); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	c.CAPEM, c.CAFile, c.CAKeyFile = pl.pki.ca.certPEM, pl.pki.caFile, pl.pki.caKeyFile
	c.Timings.PKI = time.Since(t)

	c.AdminKubeconfig = filepath.Join(c.WorkDir, "admin.kubeconfig")
	pl.kcmKubeconfig = filepath.Join(c.WorkDir, "controller-manager.kubeconfig")
	pl.schedKubeconfig = filepath.Join(c.WorkDir, "scheduler.kubeconfig")
	for file, kp := range map[string]*keyPair{c.AdminKubeconfig: pl.pki.admin, pl.kcmKubeconfig: pl.pki.controllerManager, pl.schedKubeconfig: pl.pki.scheduler} {
		if err := writeKubeconfig(file, c.LocalServer, pl.pki.ca.certPEM, kp); err != nil {
			return nil, err
		}
	}
	if c.AdminConfig, err = clientcmd.BuildConfigFromFlags("", c.AdminKubeconfig); err != nil {
		return nil, fmt.Errorf("load %s: %w", c.AdminKubeconfig, err)
	}
	if c.Client, err = kubernetes.NewForConfig(c.AdminConfig); err != nil {
		return nil, err
	}
	return pl, nil
}

// startEtcd runs etcd and waits until it is healthy.
func (c *ControlPlane) startEtcd(ctx context.Context, opts *Options, pl *startPlan) error {
	t := time.Now()
	etcd, err := c.run(opts, "etcd", []string{
		"--data-dir=" + filepath.Join(c.WorkDir, "etcd"),
		"--listen-client-url=" + pl.etcdURL(),
		"--listen-peer-url=http://127.0.0.1:" + strconv.Itoa(pl.etcdPeerPort),
	})
	if err != nil {
		return err
	}
	if err := etcd.waitFor(ctx, "etcd health", httpCheck(http.DefaultClient, pl.etcdURL()+"/health", `"health":"true"`)); err != nil {
		return err
	}
	c.Timings.Etcd = time.Since(t)
	opts.Logf("controlplane: etcd ready in %s at %s", c.Timings.Etcd.Round(time.Millisecond), pl.etcdURL())
	return nil
}

// startAPIServer runs kube-apiserver and waits until /readyz is ok.
func (c *ControlPlane) startAPIServer(ctx context.Context, opts *Options, pl *startPlan) error {
	t := time.Now()
	var authn []string
	if len(opts.AuthenticationConfig) > 0 {
		file := filepath.Join(c.WorkDir, "authentication-config.yaml")
		if err := os.WriteFile(file, opts.AuthenticationConfig, 0o600); err != nil {
			return err
		}
		authn = []string{"--authentication-config=" + file}
	}
	audit, err := c.auditArgs(opts)
	if err != nil {
		return err
	}
	authn = append(authn, audit...)
	apiserver, err := c.run(opts, "kube-apiserver", append(authn,
		"--etcd-servers="+pl.etcdURL(),
		"--bind-address="+opts.BindAddress,
		"--advertise-address="+pl.advertise,
		"--secure-port="+strconv.Itoa(pl.apiPort),
		"--cert-dir="+filepath.Join(c.WorkDir, "apiserver"),
		"--tls-cert-file="+pl.pki.apiserverCert,
		"--tls-private-key-file="+pl.pki.apiserverKey,
		"--client-ca-file="+pl.pki.caFile,
		"--kubelet-client-certificate="+pl.pki.kubeletClientCert,
		"--kubelet-client-key="+pl.pki.kubeletClientKey,
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--enable-bootstrap-token-auth=true",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--service-cluster-ip-range="+serviceCIDR,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pl.pki.saPubFile,
		"--service-account-signing-key-file="+pl.pki.saKeyFile,
		"--requestheader-client-ca-file="+pl.pki.frontProxyCAFile,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file="+pl.pki.frontProxyClientCert,
		"--proxy-client-key-file="+pl.pki.frontProxyClientKey,
		"--profiling=false",
	))
	if err != nil {
		return err
	}
	adminHTTP, err := rest.HTTPClientFor(c.AdminConfig)
	if err != nil {
		return err
	}
	if err := apiserver.waitFor(ctx, "kube-apiserver /readyz", httpCheck(adminHTTP, c.LocalServer+"/readyz", "ok")); err != nil {
		return err
	}
	c.Timings.APIServer = time.Since(t)
	opts.Logf("controlplane: kube-apiserver ready in %s at %s", c.Timings.APIServer.Round(time.Millisecond), c.LocalServer)
	return nil
}

// startControllers runs kube-controller-manager and kube-scheduler
// together and waits until both are healthy.
func (c *ControlPlane) startControllers(ctx context.Context, opts *Options, pl *startPlan) error {
	t := time.Now()
	kcmArgs := []string{
		"--kubeconfig=" + pl.kcmKubeconfig,
		"--authentication-kubeconfig=" + pl.kcmKubeconfig,
		"--authorization-kubeconfig=" + pl.kcmKubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(pl.kcmPort),
		"--cert-dir=" + filepath.Join(c.WorkDir, "controller-manager"),
		"--leader-elect=false",
		"--controllers=*,bootstrapsigner,tokencleaner",
		"--use-service-account-credentials=true",
		"--cluster-signing-cert-file=" + pl.pki.caFile,
		"--cluster-signing-key-file=" + pl.pki.caKeyFile,
		"--root-ca-file=" + pl.pki.caFile,
		"--service-account-private-key-file=" + pl.pki.saKeyFile,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--allocate-node-cidrs=true",
		"--cluster-cidr=" + cmp.Or(opts.PodCIDR, PodCIDR),
		"--requestheader-client-ca-file=" + pl.pki.frontProxyCAFile,
		"--profiling=false",
	}
	if opts.SigningDuration > 0 {
		kcmArgs = append(kcmArgs, "--cluster-signing-duration="+opts.SigningDuration.String())
	}
	kcm, err := c.run(opts, "kube-controller-manager", kcmArgs)
	if err != nil {
		return err
	}
	sched, err := c.run(opts, "kube-scheduler", []string{
		"--kubeconfig=" + pl.schedKubeconfig,
		"--authentication-kubeconfig=" + pl.schedKubeconfig,
		"--authorization-kubeconfig=" + pl.schedKubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(pl.schedPort),
		"--leader-elect=false",
		"--profiling=false",
	})
	if err != nil {
		return err
	}
	// Their serving certificates are self-signed; only health is checked.
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed component health endpoints on loopback
	var wg sync.WaitGroup
	var kcmErr, schedErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		kcmErr = kcm.waitFor(ctx, "kube-controller-manager /healthz", httpCheck(insecure, "https://127.0.0.1:"+strconv.Itoa(pl.kcmPort)+"/healthz", "ok"))
		c.Timings.ControllerManager = time.Since(t)
	}()
	go func() {
		defer wg.Done()
		schedErr = sched.waitFor(ctx, "kube-scheduler /healthz", httpCheck(insecure, "https://127.0.0.1:"+strconv.Itoa(pl.schedPort)+"/healthz", "ok"))
		c.Timings.Scheduler = time.Since(t)
	}()
	wg.Wait()
	return errors.Join(kcmErr, schedErr)
}

func (c *ControlPlane) run(opts *Options, name string, args []string) (*process, error) {
	p, err := startProcess(name, filepath.Join(opts.BinDir, name), c.LogsDir, args)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

// Stop stops every component in reverse start order: SIGTERM, then SIGKILL
// for one that has not exited within a bounded wait. It is safe to call more
// than once; the work directory is left for inspection.
func (c *ControlPlane) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		for i := len(c.procs) - 1; i >= 0; i-- {
			if err := c.procs[i].stop(); err != nil {
				errs = append(errs, err)
			}
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

// DumpLogs writes the last 16 KiB of each component's log to w.
func (c *ControlPlane) DumpLogs(w io.Writer) {
	for _, p := range c.procs {
		fmt.Fprintf(w, "===== %s (%s) =====\n%s\n", p.name, p.logFile, p.tail(16<<10))
	}
}

// Kubectl runs the kubectl built with the control plane as its admin,
// with stdin as its input, and returns what it printed.
func (c *ControlPlane) Kubectl(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, "kubectl"), append([]string{"--kubeconfig", c.AdminKubeconfig}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// BootstrapConfig is a client config for Server authenticated by the
// bootstrap token, as a kubelet's bootstrap kubeconfig is.
func (c *ControlPlane) BootstrapConfig() *rest.Config {
	return &rest.Config{
		Host:            c.Server,
		BearerToken:     c.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CAPEM},
	}
}

// BootstrapKubeconfig renders a kubeconfig for server (Server when empty)
// that authenticates with the bootstrap token: what a node is given to join.
func (c *ControlPlane) BootstrapKubeconfig(server string) ([]byte, error) {
	if server == "" {
		server = c.Server
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubernetes"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: c.CAPEM}
	cfg.AuthInfos["tls-bootstrap-token-user"] = &clientcmdapi.AuthInfo{Token: c.Token}
	cfg.Contexts["tls-bootstrap-token-user@kubernetes"] = &clientcmdapi.Context{Cluster: "kubernetes", AuthInfo: "tls-bootstrap-token-user"}
	cfg.CurrentContext = "tls-bootstrap-token-user@kubernetes"
	return clientcmd.Write(*cfg)
}
