package main

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlockhq/airlock/audit"
	"github.com/airlockhq/airlock/broker"
	"github.com/airlockhq/airlock/certs"
	"github.com/airlockhq/airlock/dnsfilter"
	"github.com/airlockhq/airlock/metrics"
	"github.com/airlockhq/airlock/policy"
	"github.com/airlockhq/airlock/proxy"
)

func newRunCmd() *cobra.Command {
	var (
		configPath string
		listen     listenFlags
		stateDir   string
		allowCIDRs []string
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the proxy (with the embedded default policy unless --config is given)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := listen.check(); err != nil {
				return err
			}
			cfg, err := loadConfig(configPath, allowCIDRs)
			if err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), err)
				return exitError{1}
			}
			listen.apply(cfg)
			for _, w := range append(cfg.Warnings(), environmentWarnings(cfg)...) {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
			}
			return run(cmd.Context(), cfg, string(cfg.Listen.Proxy), stateDir, &reloader{path: configPath, allowCIDRs: allowCIDRs, listen: listen})
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "policy file (YAML); default: the embedded policy for coding agents")
	cmd.Flags().StringVar(&listen.proxy, "listen", "", "proxy listen address, overriding listen.proxy (e.g. 0.0.0.0:3128)")
	cmd.Flags().StringVar(&listen.dns, "dns", "", "DNS listen address (UDP and TCP), overriding listen.dns (e.g. 0.0.0.0:53)")
	cmd.Flags().StringVar(&listen.admin, "admin", "", "admin listen address (/healthz, /readyz, /metrics, POST /reload), overriding listen.admin (e.g. 127.0.0.1:9090)")
	cmd.Flags().StringVar(&stateDir, "state-dir", defaultStateDir(), "where a generated interception CA is kept (env AIRLOCK_STATE_DIR)")
	cmd.Flags().StringArrayVar(&allowCIDRs, "allow-cidr", nil, "add a network.allow_cidrs exception (repeatable), e.g. 10.1.2.3/32")
	return cmd
}

// listenFlags are run's listener flags; each overrides its listen key,
// at start and on every reload.
type listenFlags struct{ proxy, dns, admin string }

// check reports a flag that is not host:port.
func (l listenFlags) check() error {
	for _, f := range []struct{ name, v string }{{"--listen", l.proxy}, {"--dns", l.dns}, {"--admin", l.admin}} {
		if f.v == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(f.v); err != nil || port == "" {
			return fmt.Errorf("%s %q: expected HOST:PORT, such as 127.0.0.1:9090", f.name, f.v)
		}
	}
	return nil
}

func (l listenFlags) apply(cfg *policy.Config) {
	if l.proxy != "" {
		cfg.Listen.Proxy = policy.ListenAddr(l.proxy)
	}
	if l.dns != "" {
		cfg.Listen.DNS = policy.ListenAddr(l.dns)
	}
	if l.admin != "" {
		cfg.Listen.Admin = policy.ListenAddr(l.admin)
	}
}

// loadConfig reads path, or the embedded default when path is empty, and
// adds the --allow-cidr exceptions.
func loadConfig(path string, allowCIDRs []string) (*policy.Config, error) {
	var cfg *policy.Config
	var err error
	if path == "" {
		cfg, err = policy.Default()
	} else {
		cfg, err = policy.Load(path)
	}
	if err != nil {
		return nil, err
	}
	extra, err := parseCIDRFlags(allowCIDRs)
	if err != nil {
		return nil, err
	}
	if cfg, err = cfg.WithAllowCIDRs(extra); err != nil {
		return nil, fmt.Errorf("--allow-cidr %w", err)
	}
	return cfg, nil
}

func parseCIDRFlags(vals []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range vals {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			if a, aerr := netip.ParseAddr(v); aerr == nil {
				p, err = netip.PrefixFrom(a, a.BitLen()), nil
			}
		}
		if err != nil || p.Addr().Zone() != "" || p != p.Masked() {
			return nil, fmt.Errorf("--allow-cidr %q: expected a CIDR such as 203.0.113.80/32", v)
		}
		out = append(out, p)
	}
	return out, nil
}

// run serves the proxy until SIGINT or SIGTERM, then shuts down
// gracefully: stop accepting, finish requests in flight, close tunnels and
// write their audit lines.
func run(ctx context.Context, cfg *policy.Config, listen, stateDir string, rl *reloader) error {
	errlog := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// net/http logs some upstream misbehaviour through the standard
	// logger, quoting response bytes ("Unsolicited response received on
	// idle HTTP channel starting with ..."): keep the message, not the data.
	log.SetFlags(0)
	log.SetOutput(stdlogWriter{errlog})
	alog, err := audit.Open(cfg.Audit.Output)
	if err != nil {
		return err
	}
	met := metrics.New()
	alog.OnEvent(met.Observe)
	defer alog.Close()

	opts := proxy.Options{Audit: alog, ErrorLog: errlog}
	if cfg.NeedsInterception() || cfg.TLS.CACert != "" {
		// Hosts with method or path rules are intercepted: load (or, the
		// first time, generate) the CA.
		certPath, keyPath, err := caPaths(cfg, stateDir)
		if err != nil {
			return err
		}
		if opts.CA, err = certs.Load(certPath, keyPath, 0); err != nil {
			return err
		}
		errlog.Info("TLS interception enabled", "ca", certPath)
	}
	if len(cfg.Credentials) > 0 {
		key, err := broker.LoadKey(stateDir)
		if err != nil {
			return fmt.Errorf("placeholder key: %w", err)
		}
		client, err := proxy.GuardedClient(cfg)
		if err != nil {
			return err
		}
		if opts.Broker, err = broker.New(cfg, key, client); err != nil {
			return err
		}
		opts.Broker.OnMint(met.Mint)
		errlog.Info("credential broker enabled", "credentials", strings.Join(opts.Broker.Names(), ","))
	}
	if cfg.Auth.Enabled() {
		key, err := broker.LoadSessionKey(cfg.Auth.Key, stateDir)
		if err != nil {
			return err
		}
		opts.Sessions = broker.NewSessionVerifier(key)
	}
	srv, err := proxy.New(cfg, opts)
	if err != nil {
		return err
	}
	// No TCP keep-alive probes on client connections either: idle_timeout
	// and header_timeout end them.
	ln, err := (&net.ListenConfig{KeepAlive: -1}).Listen(ctx, "tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (set another address with --listen or listen.proxy)", listen, err)
	}
	self := []netip.AddrPort{mustAddrPort(ln.Addr())}
	hs := srv.NewHTTPServer()
	rl.proxy, rl.errlog, rl.metrics = srv, errlog, met
	met.OpenTunnels(srv.OpenTunnels)

	var admin *http.Server
	startAdmin := func() {}
	if cfg.Listen.Admin != "" {
		aln, err := net.Listen("tcp", string(cfg.Listen.Admin))
		if err != nil {
			ln.Close()
			return fmt.Errorf("listen on admin address %s: %w", cfg.Listen.Admin, err)
		}
		self = append(self, mustAddrPort(aln.Addr()))
		admin = &http.Server{Handler: adminHandler(rl, met), ReadHeaderTimeout: 5 * time.Second}
		defer aln.Close()
		startAdmin = func() {
			go admin.Serve(aln)
			errlog.Info("admin listening", "addr", aln.Addr().String())
		}
	}
	srv.SetListenAddrs(self)

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	serveErr := make(chan error, 2)
	dnsDone := make(chan struct{})
	if cfg.Listen.DNS != "" {
		ds, err := dnsfilter.New(cfg, dnsfilter.Options{Audit: alog, ErrorLog: errlog})
		if err != nil {
			ln.Close()
			return err
		}
		rl.dns = ds
		ready := make(chan struct{})
		go func() {
			defer close(dnsDone)
			err := ds.Serve(ctx, string(cfg.Listen.DNS), func(udp, tcp net.Addr) {
				errlog.Info("dns listening", "udp", udp.String(), "tcp", tcp.String(), "mode", cfg.DNS.Mode)
				close(ready)
			})
			if err != nil {
				serveErr <- err
			}
		}()
		select {
		case <-ready:
		case err := <-serveErr:
			ln.Close()
			return err
		}
	} else {
		close(dnsDone)
	}
	startAdmin() // after the DNS server: POST /reload reaches both
	go rl.run(ctx)
	go func() { serveErr <- hs.Serve(ln) }()
	errlog.Info("airlock listening", "addr", ln.Addr().String(), "config", cfg.String(), "version", version)

	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	// Drain: stop accepting; let requests in flight and open tunnels carry
	// on for limits.drain_timeout (of the configuration in force now);
	// then close what is left, each tunnel writing its audit line.
	drain := srv.Config().Limits.DrainTimeout
	errlog.Info("shutting down", "drain", drain.String())
	sctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		errlog.Warn("requests still in flight after the drain time; closing them", "error", err)
		hs.Close()
	}
	if admin != nil {
		admin.Close()
	}
	if err := srv.Shutdown(sctx); err != nil {
		errlog.Warn("shutdown", "error", err)
	}
	stop() // ends the DNS listener too
	<-dnsDone
	return nil
}

func mustAddrPort(a net.Addr) netip.AddrPort {
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}

// adminHandler serves the liveness and readiness probes, POST /reload and
// GET /metrics (Prometheus text format).
func adminHandler(rl *reloader, met *metrics.Metrics) http.Handler {
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	}
	mux.HandleFunc("GET /healthz", ok)
	mux.HandleFunc("GET /readyz", ok)
	mux.HandleFunc("POST /reload", rl.handler)
	mux.Handle("GET /metrics", met.Handler())
	return mux
}

// stdlogWriter sends standard-library log output to slog, cut before any
// quoted data so that no upstream bytes reach the operational log.
type stdlogWriter struct{ l *slog.Logger }

func (w stdlogWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if i := strings.Index(msg, " starting with"); i >= 0 {
		msg = msg[:i]
	}
	if i := strings.IndexAny(msg, `"`); i >= 0 {
		msg = msg[:i] + "(quoted data removed)"
	}
	w.l.Warn(msg, "component", "net/http")
	return len(p), nil
}
