package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/spf13/cobra"

	"github.com/airlockhq/airlock/dnsfilter"
	"github.com/airlockhq/airlock/metrics"
	"github.com/airlockhq/airlock/proxy"
)

// reloader re-reads the configuration file on SIGHUP, when the file
// changes and on POST /reload to the admin listener. A file that does not
// load, or that changes what only a restart can change, is reported and
// the running configuration stays.
type reloader struct {
	path       string
	allowCIDRs []string
	listen     listenFlags // --listen, --dns, --admin: applied to every file read
	proxy      *proxy.Server
	dns        *dnsfilter.Server // nil without listen.dns
	errlog     *slog.Logger
	metrics    *metrics.Metrics
	mu         sync.Mutex // one reload at a time
}

func (r *reloader) reload(trigger string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.path == "" {
		err := errors.New("nothing to reload: Airlock runs the embedded default policy (start it with --config FILE)")
		r.errlog.Warn("reload", "trigger", trigger, "error", err.Error())
		return err
	}
	cfg, err := loadConfig(r.path, r.allowCIDRs)
	if err == nil {
		r.listen.apply(cfg)
		err = cfg.CheckReload(r.proxy.Config())
	}
	if r.metrics != nil {
		r.metrics.Reload(err)
	}
	if err != nil {
		r.errlog.Error("reload failed; the running configuration stays", "trigger", trigger, "error", err.Error())
		return err
	}
	closed := r.proxy.Reload(cfg)
	if r.dns != nil {
		r.dns.Reload(cfg)
	}
	for _, w := range cfg.Warnings() {
		r.errlog.Warn("config: " + w)
	}
	r.errlog.Info("configuration reloaded", "trigger", trigger, "config", cfg.String(), "tunnels_closed", closed)
	return nil
}

// run reloads on SIGHUP and on changes to the file until ctx ends. It
// watches the file's directory, so an editor's or a ConfigMap's atomic
// rename is seen too.
func (r *reloader) run(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var events <-chan fsnotify.Event
	if r.path != "" {
		if w, err := fsnotify.NewWatcher(); err != nil {
			r.errlog.Warn("cannot watch the configuration file; reload with SIGHUP or POST /reload", "error", err.Error())
		} else if err := w.Add(filepath.Dir(r.path)); err != nil {
			w.Close()
			r.errlog.Warn("cannot watch the configuration file; reload with SIGHUP or POST /reload", "error", err.Error())
		} else {
			defer w.Close()
			events = w.Events
		}
	}
	base := filepath.Base(r.path)
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.reload("SIGHUP")
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			// A ConfigMap swaps a "..data" symlink; any event in the
			// directory may mean the file changed. Wait for it to settle.
			if filepath.Base(ev.Name) == base || strings.HasPrefix(filepath.Base(ev.Name), "..") {
				debounce = time.After(200 * time.Millisecond)
			}
		case <-debounce:
			debounce = nil
			r.reload("file change")
		}
	}
}

// handler serves POST /reload on the admin listener.
func (r *reloader) handler(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := r.reload("admin"); err != nil {
		w.WriteHeader(http.StatusConflict)
		fmt.Fprintln(w, err)
		return
	}
	fmt.Fprintln(w, "reloaded")
}

func newReloadCmd() *cobra.Command {
	var admin string
	cmd := &cobra.Command{
		Use:   "reload --admin HOST:PORT",
		Short: "Ask a running Airlock to reload its configuration file (POST /reload on its admin listener)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := &http.Client{Timeout: 30 * time.Second}
			resp, err := c.Post("http://"+admin+"/reload", "text/plain", nil)
			if err != nil {
				return fmt.Errorf("reach the admin listener at %s: %w", admin, err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			if resp.StatusCode != http.StatusOK {
				fmt.Fprint(cmd.ErrOrStderr(), string(body))
				return exitError{1}
			}
			fmt.Fprint(cmd.OutOrStdout(), string(body))
			return nil
		},
	}
	cmd.Flags().StringVar(&admin, "admin", "127.0.0.1:9090", "the running Airlock's listen.admin address")
	return cmd
}
