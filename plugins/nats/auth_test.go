package nats

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/internal/testkit"
)

// externalServer starts a plain nats-server (no JetStream) with the given
// auth options on a random loopback port: the "external" broker of a sink.
func externalServer(t *testing.T, set func(*server.Options)) string {
	t.Helper()
	return testkit.NATS(t, set).ClientURL()
}

// openLogged opens a sink of cfg, closed when the test ends, that logs to
// the returned buffer.
func openLogged(t *testing.T, cfg config.NATS) (*Sink, *testkit.Buffer) {
	t.Helper()
	logs := new(testkit.Buffer)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := Open(ctx, cfg, cfg.URL, hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s, logs
}

// externalConfig is a core-NATS sink on an external server with auth.
func externalConfig(url string, auth config.NATSAuth, tlsBlock *config.TLS) config.NATS {
	cfg := config.NewNATS("ext")
	cfg.URL, cfg.MaxPending, cfg.PublishTimeout, cfg.Auth, cfg.TLS = url, 64, 5*time.Second, auth, tlsBlock
	cfg.JetStream = false // core NATS: the server under test has no JetStream
	return cfg
}

// openExternal opens a sink and publishes one message through it.
func openExternal(cfg config.NATS) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, cfg, cfg.URL, nil)
	if err != nil {
		return err
	}
	defer s.Close(ctx)
	for _, r := range s.Publish(ctx, makeMsgs("auth", "auth.test", 1)) {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

// A sink reaches a server that requires a token, an nkey or TLS with the
// credentials of its block; with a wrong credential the router still
// starts (the sink keeps trying), and a publish fails at once, as the sink
// being unavailable, with an error that names the sink and the cause and
// never shows the secret.
func TestExternalAuth(t *testing.T) {
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	serverTLS, caFile := testkit.ServerTLS(t)

	tokenURL := externalServer(t, func(o *server.Options) { o.Authorization = "s3cret-token-value" })
	nkeyURL := externalServer(t, func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: pub}} })
	userURL := externalServer(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "edge", Password: "edge-password-value"}}
	})
	tlsURL := externalServer(t, func(o *server.Options) {
		o.TLSConfig, o.TLS, o.TLSVerify = serverTLS, true, false
		o.Authorization = "tls-token-value"
	})

	tests := []struct {
		name    string
		cfg     config.NATS
		wantErr string // "" = the publish goes through
	}{
		{"token", externalConfig(tokenURL, config.NATSAuth{Token: config.Secret{File: testkit.SecretFile(t, "s3cret-token-value")}}, nil), ""},
		{"wrong token", externalConfig(tokenURL, config.NATSAuth{Token: config.Secret{File: testkit.SecretFile(t, "wrong-token")}}, nil), "nats.ext: not connected (connection RECONNECTING; last error: nats: authorization violation)"},
		{"no credentials", externalConfig(tokenURL, config.NATSAuth{}, nil), "authorization violation"},
		{"nkey", externalConfig(nkeyURL, config.NATSAuth{NKeySeedFile: testkit.SecretFile(t, string(seed))}, nil), ""},
		{"wrong nkey", externalConfig(nkeyURL, config.NATSAuth{NKeySeedFile: testkit.SecretFile(t, string(otherSeed))}, nil), "authorization violation"},
		{"user", externalConfig(userURL, config.NATSAuth{User: "edge", Password: config.Secret{File: testkit.SecretFile(t, "edge-password-value")}}, nil), ""},
		{"wrong password", externalConfig(userURL, config.NATSAuth{User: "edge", Password: config.Secret{File: testkit.SecretFile(t, "nope")}}, nil), "authorization violation"},
		{"tls", externalConfig(tlsURL, config.NATSAuth{Token: config.Secret{File: testkit.SecretFile(t, "tls-token-value")}}, &config.TLS{CAFile: caFile}), ""},
		{"tls unknown ca", externalConfig(tlsURL, config.NATSAuth{Token: config.Secret{File: testkit.SecretFile(t, "tls-token-value")}}, &config.TLS{}), "certificate signed by unknown authority"},
		{"missing password file", externalConfig(userURL, config.NATSAuth{User: "edge", Password: config.Secret{File: "/nonexistent/pw"}}, nil), "nats.ext: password: stat /nonexistent/pw"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			err := openExternal(tt.cfg)
			took := time.Since(start)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("publish failed: %v", err)
			case tt.wantErr != "" && err == nil:
				t.Fatal("the sink connected with a wrong credential")
			case tt.wantErr != "" && !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tt.wantErr)):
				t.Fatalf("error %q does not say %q", err, tt.wantErr)
			}
			if err != nil {
				for _, secret := range []string{"s3cret-token-value", "wrong-token", "edge-password-value", "nope", string(seed)} {
					if strings.Contains(err.Error(), secret) {
						t.Errorf("the error shows a secret: %v", err)
					}
				}
				if took > 5*time.Second {
					t.Errorf("a refused credential took %s to fail", took)
				}
				t.Logf("%s: %v", tt.name, err)
			}
		})
	}
}

// A password corrected in its file is used at the next reconnect: the
// sink refused by the server connects without a restart.
func TestACorrectedPasswordFileIsUsed(t *testing.T) {
	url := externalServer(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "edge", Password: "edge-password-value"}}
	})
	file := testkit.SecretFile(t, "nope")
	cfg := externalConfig(url, config.NATSAuth{User: "edge", Password: config.Secret{File: file}}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := Open(ctx, cfg, cfg.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if err := s.Healthy(ctx); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		t.Fatalf("with the wrong password: %v", err)
	}
	if err := os.WriteFile(file, []byte("edge-password-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the sink to connect with the corrected password", 15*time.Second, func() bool {
		return s.Healthy(ctx) == nil
	})
	for _, r := range s.Publish(ctx, makeMsgs("auth", "auth.test", 1)) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
}

// A CA file renewed in place is trusted at the next reconnect: the
// server restarted with a certificate of a new CA, added to the sink's
// ca_file meanwhile, is reached with no restart of the router (the file
// was read at start only, and the sink refused the server until then).
func TestARenewedCAFileIsTrustedAtTheNextReconnect(t *testing.T) {
	first, second := testkit.NewCA(t), testkit.NewCA(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	testkit.WriteCAFile(t, caFile, first)
	withCert := func(ca *testkit.CA, port int) func(*server.Options) {
		return func(o *server.Options) { o.Port, o.TLSConfig, o.TLS = port, ca.ServerTLS(t), true }
	}
	srv := testkit.NATS(t, withCert(first, -1))
	port := srv.Addr().(*net.TCPAddr).Port
	s, _ := openLogged(t, externalConfig(srv.ClientURL(), config.NATSAuth{}, &config.TLS{CAFile: caFile}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	publish := func() error {
		for _, r := range s.Publish(ctx, makeMsgs("auth", "auth.test", 1)) {
			if r.Err != nil {
				return r.Err
			}
		}
		return nil
	}
	if err := publish(); err != nil {
		t.Fatal(err)
	}
	// The new CA joins the bundle, then the server moves to a certificate
	// it signed, as a CA rotation goes.
	testkit.WriteCAFile(t, caFile, first, second)
	srv.Shutdown()
	srv.WaitForShutdown()
	testkit.NATS(t, withCert(second, port))
	// A publish, not Healthy: the sink may not have seen the old server go.
	testkit.Eventually(t, "a publish to the server of the renewed CA file", 20*time.Second, func() bool {
		return publish() == nil
	})
}

// Every file of secrets the client reads (a password, a creds file, an
// nkey seed, a TLS client key) is refused, naming its attribute and the
// mode to set, when others may read it.
func TestSecretFileModes(t *testing.T) {
	open := func(t *testing.T) string {
		f := testkit.SecretFile(t, "secret")
		if err := os.Chmod(f, 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, c := range []struct {
		attr string
		cfg  func(f string) config.NATS
	}{
		{"password", func(f string) config.NATS {
			return config.NATS{Auth: config.NATSAuth{User: "u", Password: config.Secret{File: f}}}
		}},
		{"creds_file", func(f string) config.NATS { return config.NATS{Auth: config.NATSAuth{CredsFile: f}} }},
		{"nkey_seed_file", func(f string) config.NATS { return config.NATS{Auth: config.NATSAuth{NKeySeedFile: f}} }},
		{"key_file", func(f string) config.NATS {
			return config.NATS{TLS: &config.TLS{CertFile: testkit.SecretFile(t, "cert"), KeyFile: f}}
		}},
	} {
		_, err := ClientOptions(c.cfg(open(t)), nil)
		if err == nil || !strings.Contains(err.Error(), c.attr+":") || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("a 0644 %s: %v", c.attr, err)
		}
	}
}

// The embedded server admits only the router's user: a client without the
// password (any other local user or process) can neither read nor publish,
// and the generated password file is private to the router's user.
func TestEmbeddedServerRequiresPassword(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(true)
	cfg.Auth = config.NATSAuth{User: "switchyard", Password: config.Secret{File: filepath.Join(dir, "nats-local.password")}}
	srv := startServer(t, cfg, dir)
	fi, err := os.Stat(cfg.Auth.Password.File)
	if err != nil {
		t.Fatalf("no password file generated: %v", err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("password file mode %04o, want 0600", perm)
	}
	if pw, _ := cfg.Auth.Password.Read(); len(pw) < 40 {
		t.Errorf("generated password %d characters long", len(pw))
	}
	for _, opts := range [][]natsOption{nil, {userInfo("switchyard", "guess")}, {userInfo("", "")}} {
		if nc, err := connectWith(srv.ClientURL(), opts...); err == nil {
			nc.Close()
			t.Fatalf("connected without the password (%d options)", len(opts))
		} else if !strings.Contains(err.Error(), "Authorization Violation") {
			t.Errorf("unexpected error: %v", err)
		}
	}
	// The router's own sink gets in, and a second start keeps the password.
	before, _ := os.ReadFile(cfg.Auth.Password.File)
	requireOK(t, openSink(t, cfg, srv.ClientURL()).Publish(pubCtx(t, 5*time.Second), makeMsgs("in", "orders.in", 1)), 1)
	srv.Close(context.Background())
	startServer(t, cfg, dir)
	if after, _ := os.ReadFile(cfg.Auth.Password.File); string(after) != string(before) {
		t.Error("a restart generated a new password")
	}
}

// In a data folder anyone may write (sticky, as /tmp), what another user
// put there before the first start is not taken: a link at the password's
// path (a security trial's, to a root-owned 0600 file holding "28", made
// "28" the broker's password), a link at the store's path (the trial's
// put every stream file in that user's folders), or another user's
// password file.
func TestEmbeddedServerTakesNothingPlantedInItsFolder(t *testing.T) {
	for _, c := range []struct{ name, planted, want string }{
		{"password link", "nats-local.password", "is a symbolic link in"},
		{"store link", "nats", "is a symbolic link in"},
		{"another user's password", "", "is owned by uid 4242"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			os.Chmod(dir, 0o777|os.ModeSticky)
			cfg := testConfig(true)
			cfg.Auth = config.NATSAuth{User: "switchyard", Password: config.Secret{File: filepath.Join(dir, "nats-local.password")}}
			elsewhere := t.TempDir()
			if c.planted != "" {
				target := filepath.Join(elsewhere, "x")
				os.WriteFile(target, []byte("28\n"), 0o600)
				if c.planted == "nats" {
					target = elsewhere
				}
				if err := os.Symlink(target, filepath.Join(dir, c.planted)); err != nil {
					t.Fatal(err)
				}
			} else {
				os.WriteFile(cfg.Auth.Password.File, []byte("28\n"), 0o600)
				if !testkit.GiveToStranger(t, cfg.Auth.Password.File) {
					return
				}
			}
			srv, err := StartServer(cfg, dir, testLogger(t))
			if err == nil {
				srv.Close(context.Background())
				t.Fatal("started on what another user put in its folder")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want it to say %q", err, c.want)
			}
		})
	}
}

// A password file the operator named outside the data folder is read as
// a secret, not checked as one the router made: a Kubernetes secret volume
// (root's, mode 1777, each key a link into ..data) starts the server. (A
// review: the planted-link check refused it, advising to remove it.)
func TestEmbeddedServerTakesAKubernetesSecretAsItsPassword(t *testing.T) {
	mount := filepath.Join(t.TempDir(), "nats-secret")
	os.Mkdir(mount, 0o755)
	ts := filepath.Join(mount, "..2026_12_01_10_00_00.123")
	os.Mkdir(ts, 0o755)
	os.WriteFile(filepath.Join(ts, "password"), []byte("s3cret-s3cret-s3cret\n"), 0o400)
	os.Symlink(filepath.Base(ts), filepath.Join(mount, "..data"))
	os.Symlink("..data/password", filepath.Join(mount, "password"))
	os.Chmod(mount, 0o777|os.ModeSticky)
	cfg := testConfig(true)
	cfg.Auth = config.NATSAuth{User: "switchyard", Password: config.Secret{File: filepath.Join(mount, "password")}}
	srv, err := StartServer(cfg, t.TempDir(), testLogger(t))
	if err != nil {
		t.Fatalf("refused the operator's secret mount: %v", err)
	}
	srv.Close(context.Background())
}

// After a JetStream store write error the embedded server says so
// (Healthy), restarts itself in place on the same port and store, and the
// router's sink — which reconnects by itself — publishes again: no restart
// of the router; its storage limit does not depend on the disk's free bytes
// at the restart. (The error is signalled as the server's logger does on
// "Critical write error"; a real one needs a full disk or no descriptors.)
func TestEmbeddedServerRecoversFromWriteError(t *testing.T) {
	defer func(d time.Duration) { recoverAfter = d }(recoverAfter)
	recoverAfter = 100 * time.Millisecond
	cfg := testConfig(true)
	srv := startServer(t, cfg, t.TempDir())
	sink := openSink(t, cfg, srv.ClientURL())
	url := srv.ClientURL()
	requireOK(t, sink.Publish(pubCtx(t, 5*time.Second), makeMsgs("before", "orders.a", 5)), 5)

	srv.serverLoggerFor().Errorf("JetStream resource: Critical write error: %v", "write /store/1.blk: too many open files")
	if err := srv.Healthy(context.Background()); err == nil || !strings.Contains(err.Error(), "too many open files") {
		t.Fatalf("Healthy after a write error: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for srv.Restarts() == 0 || srv.Healthy(context.Background()) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not recovered: %d restarts, %v", srv.Restarts(), srv.Healthy(context.Background()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if srv.ClientURL() != url {
		t.Errorf("the restarted server moved from %s to %s", url, srv.ClientURL())
	}
	var res []switchyard.Result
	for time.Now().Before(deadline) {
		if res = sink.Publish(pubCtx(t, 5*time.Second), makeMsgs("after", "orders.a", 5)); res[0].Err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	requireOK(t, res, 5)
	if got := testkit.StreamMsgs(t, url, "ORDERS", testAuth); got != 10 {
		t.Errorf("the stream holds %d messages after the restart, want 10", got)
	}
	// The restarted server's storage limit is its filesystem's size, not
	// one sized from the disk's free bytes at the restart: on a disk that
	// was full then, that limit would have been nothing, and every later
	// message refused ("insufficient resources") after the disk had room
	// again.
	var fs syscall.Statfs_t
	if err := syscall.Statfs(srv.StoreDir(), &fs); err != nil {
		t.Fatal(err)
	}
	if max, size := srv.ns.JetStreamConfig().MaxStore, int64(fs.Blocks)*int64(fs.Bsize); max != size {
		t.Errorf("JetStream's storage limit after the restart is %d, want the filesystem's size %d", max, size)
	}
}

// An embedded server whose port another process holds does not start, and
// the router hears why as soon as the server gives up — the port in use and
// what to do — instead of "not ready" after readyTimeout (30 s); once the
// port is free, it starts there.
func TestEmbeddedServerPortInUse(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	port := held.Addr().(*net.TCPAddr).Port
	cfg := testConfig(true)
	cfg.Port = port
	dir := t.TempDir()
	start := time.Now()
	srv, err := StartServer(cfg, dir, testLogger(t))
	if err == nil {
		srv.Close(context.Background())
		t.Fatal("started on a port another process holds")
	}
	took := time.Since(start)
	for _, want := range []string{"embedded server did not start", "address already in use", fmt.Sprintf("another process listens on port %d", port)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	t.Logf("refused in %v: %v", took, err) // "did not start" is the fatal error's path, not readyTimeout's
	// Nothing of the failed start holds on: once the other process lets
	// go, the server starts on that port and store.
	held.Close()
	srv = startServer(t, cfg, dir)
	if !strings.HasSuffix(srv.ClientURL(), fmt.Sprintf(":%d", port)) {
		t.Errorf("started at %s, not on port %d", srv.ClientURL(), port)
	}
}

// A user the server drops for a while (a reload with an edited account)
// and then takes back: the sink says it is refused, reconnects and
// publishes again, and no longer reports the refusal. Before,
// nats.go gave up after the second authorization error, and the sink's
// connection was closed for good (a broker trial).
func TestSinkReconnectsAfterAuthorizationErrors(t *testing.T) {
	var opts *server.Options
	srv := testkit.NATS(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "edge", Password: "edge-password-value"}}
		opts = o
	})
	cfg := externalConfig(srv.ClientURL(), config.NATSAuth{User: "edge", Password: config.Secret{File: testkit.SecretFile(t, "edge-password-value")}}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := Open(ctx, cfg, cfg.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	reload := func(users []*server.User) {
		o := opts.Clone()
		o.Users = users
		if err := srv.ReloadOptions(o); err != nil {
			t.Fatal(err)
		}
	}
	reload([]*server.User{{Username: "someone-else", Password: "x-password-value"}})
	time.Sleep(3 * time.Second) // several reconnects refused
	// Healthy (/readyz) says why: the refusal, not the closed socket
	// that follows it.
	if err := s.Healthy(ctx); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		t.Errorf("Healthy while the server refuses the user: %v", err)
	}
	reload([]*server.User{{Username: "edge", Password: "edge-password-value"}})
	testkit.EventuallyWith(t, 20*time.Second, func() bool {
		for _, r := range s.Publish(ctx, makeMsgs("auth", "auth.test", 1)) {
			if r.Err != nil {
				return false
			}
		}
		return true
	}, func() string { return "the sink did not publish again once its user was back" })
	// Connected again, the refusal is no longer its last connection error.
	if err := s.conn.lastError(); err != nil {
		t.Errorf("the last connection error once connected again: %v", err)
	}
}

// The embedded server's authentication errors are logged at most once a
// second: another local user's failed connections logged a line each
// (300 for 300 tries, a security trial).
func TestFailedLoginsAreThrottled(t *testing.T) {
	var logs testkit.Buffer
	cfg := testConfig(false)
	srv, err := StartServer(cfg, t.TempDir(), hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	for range 30 {
		if nc, err := natsgo.Connect(srv.ClientURL(), natsgo.UserInfo("switchyard", "wrong"), natsgo.NoReconnect()); err == nil {
			nc.Close()
			t.Fatal("a wrong password connected")
		}
	}
	if n := strings.Count(logs.String(), "authentication error"); n < 1 || n > 3 {
		t.Fatalf("%d lines for 30 failed logins:\n%s", n, logs.String())
	}
}

// A password rotated into a file the router refuses for its mode (a new
// file written under umask 022 and moved into place) is logged with what
// to do ("chmod 600 ..."), as a renewed TLS key refused for its mode is,
// and used once the mode is fixed. Before, the refusal was dropped (the
// last value kept, silently): the log and /readyz said only
// "authorization violation" (a credential rotation trial).
func TestARotatedPasswordFileRefusedForItsModeIsTold(t *testing.T) {
	url := externalServer(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "edge", Password: "edge-password-value"}}
	})
	file := testkit.SecretFile(t, "nope")
	cfg := externalConfig(url, config.NATSAuth{User: "edge", Password: config.Secret{File: file}}, nil)
	s, logs := openLogged(t, cfg)
	ctx := context.Background()
	// The right password, in a new file of mode 0644 moved over the old.
	tmp := filepath.Join(filepath.Dir(file), "new")
	if err := os.WriteFile(tmp, []byte("edge-password-value\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(tmp, 0o644)
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // several reconnect attempts (every 500ms)
	if l := logs.String(); strings.Count(l, "chmod 600 "+file) != 1 {
		t.Errorf("the password file refused for its mode is not told once:\n%s", l)
	}
	os.Chmod(file, 0o600)
	testkit.Eventually(t, "the sink to connect once the file is 0600", 15*time.Second, func() bool {
		return s.Healthy(ctx) == nil
	})
}
