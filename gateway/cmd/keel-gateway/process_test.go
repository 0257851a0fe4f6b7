// SPDX-License-Identifier: Apache-2.0

package main

// A keel-gateway process for the tests that drive it with the stock faas-cli: this test
// binary as keel-gateway (TestMain), on free loopback ports, stopped by its PID.

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/testredis"
	"github.com/keel-nfv/keel/internal/testapiserver"
)

// asGateway in a test binary's environment makes it keel-gateway: the tests run the
// gateway as a process of its own, from the code under test, without building it apart.
const asGateway = "KEEL_TEST_BINARY_IS_KEEL_GATEWAY"

// TestMain runs the tests, or keel-gateway's main when started as a gateway process.
func TestMain(m *testing.M) {
	if os.Getenv(asGateway) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// keelNF is the keel-nf that make build made ($KEEL_BIN, else build/bin): the gateway
// reads the NF catalogue from it at start. The test skips without it.
func keelNF(t *testing.T, root string) string {
	t.Helper()
	dir := os.Getenv("KEEL_BIN")
	if dir == "" {
		dir = filepath.Join(root, "build", "bin")
	}
	p := filepath.Join(dir, "keel-nf")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("keel-nf is not built (%v): keel-gateway reads its NF catalogue at start; run make build", err)
	}
	return p
}

// faasCLI is the stock faas-cli: $FAAS_CLI, else on PATH, else the shared tools' copy
// beside the repository. The test skips without it.
func faasCLI(t *testing.T, root string) string {
	t.Helper()
	if p := os.Getenv("FAAS_CLI"); p != "" {
		return p
	}
	if p, err := exec.LookPath("faas-cli"); err == nil {
		return p
	}
	p := filepath.Join(filepath.Dir(root), "shared", "tools", "faas-cli")
	if _, err := os.Stat(p); err != nil {
		t.Skip("faas-cli is not installed (set FAAS_CLI, or put it on PATH)")
	}
	return p
}

// needTools skips the test, before it starts anything, when keel-nf or faas-cli is missing.
func needTools(t *testing.T) {
	t.Helper()
	root, err := testapiserver.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	keelNF(t, root)
	faasCLI(t, root)
}

// gatewayProc is one keel-gateway: its own Redis, secrets directory and faas-cli HOME;
// restartable with the same state.
type gatewayProc struct {
	t        *testing.T
	name     string // in failure messages: which gateway
	bin, cli string // the gateway (this test binary) and faas-cli
	dir      string // secrets/, home/, gateway.log
	args     []string
	URL      string
	cmd      *exec.Cmd
	done     chan struct{}
	exitErr  error
}

// newGateway prepares a keel-gateway on free loopback ports with a fresh Redis and the
// given extra flags; start runs it.
func newGateway(t *testing.T, name string, extra ...string) *gatewayProc {
	t.Helper()
	root, err := testapiserver.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	g := &gatewayProc{t: t, name: name, bin: self, cli: faasCLI(t, root), dir: t.TempDir()}
	if err := os.Mkdir(filepath.Join(g.dir, "home"), 0o700); err != nil {
		t.Fatal(err)
	}
	rs := testredis.Start(t)
	listen := testapiserver.FreeAddr(t)
	g.URL = "http://" + listen
	g.args = append([]string{"--listen", listen, "--grpc-listen", testapiserver.FreeAddr(t), "--redis", rs.Addr,
		"--placer", testapiserver.FreeAddr(t), "--secrets", filepath.Join(g.dir, "secrets"),
		"--topology", filepath.Join(root, "deploy", "local", "topology.yaml"), "--keel-nf", keelNF(t, root),
		// No container engine: normal functions run on the backend under test, and packet
		// functions take their arguments from their annotation.
		"--docker", "unix://" + filepath.Join(g.dir, "no-docker.sock"),
		"--nf-costs", filepath.Join(g.dir, "none.json"), "--chain-costs", filepath.Join(g.dir, "none.json")}, extra...)
	t.Cleanup(g.stop)
	return g
}

// launch runs the gateway process, its output appended to gateway.log.
func (g *gatewayProc) launch() {
	g.t.Helper()
	log, err := os.OpenFile(filepath.Join(g.dir, "gateway.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		g.t.Fatal(err)
	}
	defer log.Close()
	g.cmd = exec.Command(g.bin, g.args...)
	g.cmd.Env = append(os.Environ(), asGateway+"=1")
	g.cmd.Stdout, g.cmd.Stderr = log, log
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := g.cmd.Start(); err != nil {
		g.t.Fatalf("start %s: %v", g.name, err)
	}
	g.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		g.exitErr = cmd.Wait()
		close(done)
	}(g.cmd, g.done)
}

// start runs the gateway and waits until it answers /healthz; it fails the test with the
// gateway's log if it exits first.
func (g *gatewayProc) start() {
	g.t.Helper()
	g.launch()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(g.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-g.done:
			g.t.Fatalf("%s exited (%v); its log:\n%s", g.name, g.exitErr, g.log())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("%s did not answer /healthz within 60 s; its log:\n%s", g.name, g.log())
		}
	}
}

// exits runs the gateway and returns its log once it exits, failing the test if it still
// runs after timeout.
func (g *gatewayProc) exits(timeout time.Duration) string {
	g.t.Helper()
	g.launch()
	select {
	case <-g.done:
		return g.log()
	case <-time.After(timeout):
		g.t.Fatalf("%s still runs after %v; its log:\n%s", g.name, timeout, g.log())
		return ""
	}
}

// stop ends the gateway (SIGTERM, then SIGKILL after 10 s) if it runs.
func (g *gatewayProc) stop() {
	if g.cmd == nil || g.cmd.Process == nil {
		return
	}
	select {
	case <-g.done:
		return
	default:
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(10 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
	}
}

func (g *gatewayProc) log() string {
	b, _ := os.ReadFile(filepath.Join(g.dir, "gateway.log"))
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}

// password is the basic-auth password the gateway created at its first start.
func (g *gatewayProc) password() string {
	g.t.Helper()
	b, err := os.ReadFile(filepath.Join(g.dir, "secrets", "basic-auth-password"))
	if err != nil {
		g.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// faas runs faas-cli against the gateway (-g) with the test's HOME (its login) in dir
// (where stack files are); it returns the combined output and the error of a failed run.
func (g *gatewayProc) faas(stdin string, args ...string) (string, error) {
	g.t.Helper()
	cmd := exec.Command(g.cli, append(args, "-g", g.URL)...)
	cmd.Dir = g.dir
	cmd.Env = append(os.Environ(), "HOME="+filepath.Join(g.dir, "home"))
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// mustFaas is faas that fails the test, with the gateway's log, when faas-cli does.
func (g *gatewayProc) mustFaas(args ...string) string {
	g.t.Helper()
	out, err := g.faas("", args...)
	if err != nil {
		g.t.Fatalf("faas-cli %s: %v\n%s\n%s's log:\n%s", strings.Join(args, " "), err, out, g.name, g.log())
	}
	return out
}

// login runs faas-cli login with the gateway's password.
func (g *gatewayProc) login() {
	g.t.Helper()
	if out, err := g.faas(g.password(), "login", "-u", "admin", "--password-stdin"); err != nil {
		g.t.Fatalf("faas-cli login: %v\n%s", err, out)
	}
}
