package examples

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/policy"
)

// objects decodes every document of a Kubernetes manifest strictly (an
// unknown or misspelt field is an error) into its API type.
func objects(t *testing.T, path string) []any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []any
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		var head struct{ APIVersion, Kind string }
		if err := sigsyaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("%s document %d: %v", path, i, err)
		}
		if head.Kind == "" {
			continue // comments only
		}
		var obj any
		switch head.APIVersion + " " + head.Kind {
		case "v1 ConfigMap":
			obj = &corev1.ConfigMap{}
		case "v1 Pod":
			obj = &corev1.Pod{}
		case "v1 Service":
			obj = &corev1.Service{}
		case "apps/v1 Deployment":
			obj = &appsv1.Deployment{}
		case "networking.k8s.io/v1 NetworkPolicy":
			obj = &networkingv1.NetworkPolicy{}
		default:
			t.Fatalf("%s document %d: unexpected %s %s", path, i, head.APIVersion, head.Kind)
		}
		if err := sigsyaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s document %d (%s): %v", path, i, head.Kind, err)
		}
		out = append(out, obj)
	}
	return out
}

func find[T any](objs []any) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// airlockConfig loads the airlock.yaml a ConfigMap carries.
func airlockConfig(t *testing.T, cm *corev1.ConfigMap) *policy.Config {
	t.Helper()
	cfg, err := policy.Parse(cm.Name+"/airlock.yaml", []byte(cm.Data["airlock.yaml"]))
	if err != nil {
		t.Fatalf("ConfigMap %s: %v", cm.Name, err)
	}
	return cfg
}

func env(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func probeCommand(p *corev1.Probe) []string {
	if p == nil || p.Exec == nil {
		return nil
	}
	return p.Exec.Command
}

func TestKubernetesSidecarExample(t *testing.T) {
	objs := objects(t, "kubernetes/sidecar.yaml")
	cms, pods := find[*corev1.ConfigMap](objs), find[*corev1.Pod](objs)
	if len(cms) != 1 || len(pods) != 1 {
		t.Fatalf("%d ConfigMaps, %d Pods; want one each", len(cms), len(pods))
	}
	cfg, pod := airlockConfig(t, cms[0]), pods[0]
	byName := map[string]corev1.Container{}
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		byName[c.Name] = c
	}
	lock, al, agent := byName["egress-lock"], byName["airlock"], byName["agent"]
	if al.RestartPolicy == nil || *al.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("airlock is not a native sidecar (restartPolicy: Always): the agent could start before it")
	}
	if pod.Spec.InitContainers[0].Name != "egress-lock" {
		t.Error("egress-lock must run first, before anything else in the Pod sends a packet")
	}
	uid := *al.SecurityContext.RunAsUser
	script := strings.Join(lock.Command, " ")
	if !strings.Contains(script, fmt.Sprintf("airlock_uid=%d", uid)) || !strings.Contains(script, "--uid-owner") ||
		!strings.Contains(script, "ip6tables") || !strings.Contains(script, "-j REJECT") {
		t.Errorf("egress-lock does not let only uid %d out (IPv4 and IPv6):\n%s", uid, script)
	}
	if a := agent.SecurityContext; a == nil || a.RunAsUser == nil || *a.RunAsUser == uid || a.Capabilities == nil || !slices.Contains(a.Capabilities.Drop, "ALL") {
		t.Error("the agent must run as another user than Airlock, with every capability dropped")
	}
	if rof := al.SecurityContext.ReadOnlyRootFilesystem; rof == nil || !*rof {
		t.Error("Airlock's root filesystem is not read-only")
	}

	proxyURL := "http://" + string(cfg.Listen.Proxy)
	if env(agent, "HTTPS_PROXY") != proxyURL || env(agent, "http_proxy") != proxyURL {
		t.Errorf("the agent's proxy is %q; Airlock listens at %s", env(agent, "HTTPS_PROXY"), cfg.Listen.Proxy)
	}
	host, port, _ := net.SplitHostPort(string(cfg.Listen.DNS))
	if pod.Spec.DNSPolicy != corev1.DNSNone || pod.Spec.DNSConfig == nil || !slices.Equal(pod.Spec.DNSConfig.Nameservers, []string{host}) || port != "53" {
		t.Errorf("the Pod's resolver is not Airlock's DNS listener %s", cfg.Listen.DNS)
	}
	want := []string{"/usr/local/bin/airlock", "healthcheck", "--admin", string(cfg.Listen.Admin)}
	for name, p := range map[string]*corev1.Probe{"startup": al.StartupProbe, "readiness": al.ReadinessProbe, "liveness": al.LivenessProbe} {
		if !slices.Equal(probeCommand(p), want) {
			t.Errorf("%s probe %v; want %v", name, probeCommand(p), want)
		}
	}
	// The CA key is in the airlock-ca Secret: only Airlock's containers mount it.
	for _, c := range pod.Spec.Containers {
		for _, m := range c.VolumeMounts {
			if m.Name == "airlock-ca" || m.Name == "airlock-state" {
				t.Errorf("container %s mounts %s, which holds the CA key", c.Name, m.Name)
			}
		}
	}
	if !strings.HasPrefix(cfg.TLS.CACert, "/etc/airlock/ca/") {
		t.Errorf("tls.ca_cert %s is not in the Secret's mount", cfg.TLS.CACert)
	}
	if pod.Spec.SecurityContext.FSGroup == nil || *pod.Spec.SecurityContext.FSGroup != *al.SecurityContext.RunAsGroup {
		t.Error("fsGroup must be Airlock's group, or it cannot read the CA Secret (mode 0440)")
	}
}

func TestKubernetesSharedExample(t *testing.T) {
	objs := objects(t, "kubernetes/shared.yaml")
	cfg := airlockConfig(t, find[*corev1.ConfigMap](objs)[0])
	svc := find[*corev1.Service](objs)[0]
	dep := find[*appsv1.Deployment](objs)[0]
	pods := find[*corev1.Pod](objs)
	nps := find[*networkingv1.NetworkPolicy](objs)
	if len(pods) != 1 || len(nps) != 2 {
		t.Fatalf("%d agent Pods, %d NetworkPolicies; want 1 and 2", len(pods), len(nps))
	}
	agentPod, agent := pods[0], pods[0].Spec.Containers[0]
	if env(agent, "HTTPS_PROXY") != "http://"+svc.Spec.ClusterIP+":3128" || !slices.Equal(agentPod.Spec.DNSConfig.Nameservers, []string{svc.Spec.ClusterIP}) {
		t.Errorf("the agent does not use the Service's ClusterIP %s for proxy and DNS", svc.Spec.ClusterIP)
	}
	if _, port, _ := net.SplitHostPort(string(cfg.Listen.Proxy)); port != "3128" {
		t.Errorf("Airlock listens on %s, the Service targets 3128", cfg.Listen.Proxy)
	}
	var egress *networkingv1.NetworkPolicy
	for _, np := range nps {
		if slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
			egress = np
		}
	}
	if egress == nil || len(egress.Spec.Egress) != 1 {
		t.Fatal("no single-rule egress NetworkPolicy for agents")
	}
	for k, v := range egress.Spec.PodSelector.MatchLabels {
		if agentPod.Labels[k] != v {
			t.Errorf("the egress policy does not select the agent Pod (%s=%s)", k, v)
		}
	}
	to := egress.Spec.Egress[0].To
	if len(to) != 1 || to[0].PodSelector == nil || to[0].IPBlock != nil || to[0].NamespaceSelector != nil {
		t.Fatalf("agent egress goes to %+v; want Airlock's Pods only", to)
	}
	for k, v := range to[0].PodSelector.MatchLabels {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("agent egress selects %s=%s, which Airlock's Pods do not carry", k, v)
		}
	}
	grace := time.Duration(*dep.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	if grace <= cfg.Limits.DrainTimeout {
		t.Errorf("terminationGracePeriodSeconds %v is not above limits.drain_timeout %v", grace, cfg.Limits.DrainTimeout)
	}
}

// The compose example: the agent's only network is internal, its proxy
// and resolver are Airlock's address on it, and it never mounts the
// state volume that holds the CA key.
func TestComposeExample(t *testing.T) {
	data, err := os.ReadFile("compose/docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	type service struct {
		Image       string
		Command     []string
		Networks    yaml.Node
		Volumes     []string
		Environment map[string]string
		ReadOnly    bool                                  `yaml:"read_only"`
		DependsOn   map[string]struct{ Condition string } `yaml:"depends_on"`
	}
	var c struct {
		Services map[string]service
		Networks map[string]struct {
			Internal bool
		}
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.Load("compose/airlock.yaml")
	if err != nil {
		t.Fatal(err)
	}
	airlock, agent := c.Services["airlock"], c.Services["agent"]
	var agentNets []string
	if err := agent.Networks.Decode(&agentNets); err != nil || !slices.Equal(agentNets, []string{"sandbox"}) || !c.Networks["sandbox"].Internal {
		t.Errorf("the agent is on %v; want only the internal network sandbox", agentNets)
	}
	var airlockNets map[string]struct {
		IPv4 string `yaml:"ipv4_address"`
	}
	if err := airlock.Networks.Decode(&airlockNets); err != nil || airlockNets["sandbox"].IPv4 == "" {
		t.Fatalf("airlock has no fixed address on sandbox: %v", err)
	}
	if _, ok := airlockNets["egress"]; !ok || c.Networks["egress"].Internal {
		t.Error("airlock is not on a network with a route out")
	}
	ip := airlockNets["sandbox"].IPv4
	if string(cfg.Listen.Proxy) != ip+":3128" || string(cfg.Listen.DNS) != ip+":53" {
		t.Errorf("airlock.yaml listens on %s and %s; the agent expects %s", cfg.Listen.Proxy, cfg.Listen.DNS, ip)
	}
	for _, k := range []string{"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"} {
		if agent.Environment[k] != "http://"+ip+":3128" {
			t.Errorf("agent %s=%q", k, agent.Environment[k])
		}
	}
	resolv, _ := os.ReadFile("compose/resolv.conf")
	if !strings.Contains(string(resolv), "nameserver "+ip+"\n") || strings.Count(string(resolv), "nameserver") != 1 {
		t.Errorf("resolv.conf does not name Airlock (%s) alone:\n%s", ip, resolv)
	}
	for _, v := range agent.Volumes {
		if strings.HasPrefix(v, "airlock-state:") || !strings.HasSuffix(v, ":ro") {
			t.Errorf("agent volume %q: the agent must mount only read-only volumes without the CA key", v)
		}
	}
	if agent.DependsOn["airlock"].Condition != "service_healthy" || !airlock.ReadOnly {
		t.Error("the agent must wait for a healthy Airlock, which runs read-only")
	}
	ca := c.Services["airlock-ca"]
	if !slices.Contains(ca.Command, "--bundle") || agent.Environment["SSL_CERT_FILE"] != "/etc/airlock-ca/ca-bundle.pem" {
		t.Error("the agent must trust a bundle of the system roots plus Airlock's CA")
	}
	// The one-shot's command is a real airlock command line.
	dir := t.TempDir()
	args := slices.Clone(ca.Command)
	for i, a := range args {
		args[i] = strings.NewReplacer("/var/lib/airlock", filepath.Join(dir, "state"), "/ca/", dir+"/").Replace(a)
	}
	if out, err := exec.Command(testutil.Binary(t), args...).CombinedOutput(); err != nil {
		t.Fatalf("airlock %v: %v\n%s", args, err, out)
	}
}

// dockerfileArgs returns the exec-form JSON array of the Dockerfile line
// starting with prefix (e.g. "CMD", "HEALTHCHECK"), continuation lines
// joined.
func dockerfileArgs(t *testing.T, df, prefix string) []string {
	t.Helper()
	joined := strings.ReplaceAll(df, "\\\n", " ")
	for _, line := range strings.Split(joined, "\n") {
		if !strings.HasPrefix(line, prefix+" ") {
			continue
		}
		i := strings.Index(line, "[")
		var args []string
		if i < 0 || json.Unmarshal([]byte(line[i:]), &args) != nil {
			t.Fatalf("%s is not in exec form: %s", prefix, line)
		}
		return args
	}
	t.Fatalf("no %s line", prefix)
	return nil
}

// The image's default command starts an Airlock whose HEALTHCHECK passes;
// the image runs as a non-root user with its state on a volume.
func TestDockerfileCommandIsHealthy(t *testing.T) {
	data, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(data)
	entry := dockerfileArgs(t, df, "ENTRYPOINT")
	cmd := dockerfileArgs(t, df, "CMD")
	health := dockerfileArgs(t, df, "HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3")
	if !slices.Equal(entry, []string{"/usr/local/bin/airlock"}) || health[0] != "/usr/local/bin/airlock" {
		t.Fatalf("ENTRYPOINT %v, HEALTHCHECK %v", entry, health)
	}
	if !regexp.MustCompile(`(?m)^USER 65532:65532$`).MatchString(df) || !strings.Contains(df, `VOLUME ["/var/lib/airlock"]`) ||
		!strings.Contains(df, "ENV AIRLOCK_STATE_DIR=/var/lib/airlock") {
		t.Error("the image must run as 65532 with its state directory a volume")
	}
	// Run the default command (on loopback, port 0) and its health check.
	args := slices.Clone(cmd)
	for i, a := range args {
		if a == "0.0.0.0:3128" {
			args[i] = "127.0.0.1:0"
		}
	}
	admin := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	for i, a := range args {
		if a == "127.0.0.1:9090" {
			args[i] = admin
		}
	}
	testutil.StartProxyArgs(t, append(args, "--state-dir", t.TempDir())...)
	check := slices.Clone(health)
	for i, a := range check {
		if a == "127.0.0.1:9090" {
			check[i] = admin
		}
	}
	if out, err := exec.Command(testutil.Binary(t), check[1:]...).CombinedOutput(); err != nil {
		t.Errorf("HEALTHCHECK %v against the image's CMD: %v\n%s", check, err, out)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
