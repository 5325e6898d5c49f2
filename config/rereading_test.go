package config

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// A secret in a file is read again at each use: a corrected value is
// given at once, and while the file is empty, gone or refused for its mode
// the last value read is, each cause told once (a rotated password in a
// file of mode 0644 was dropped silently: a trial); one from the
// environment is read once.
func TestSecretRereading(t *testing.T) {
	path := testkit.SecretFile(t, "first")
	var told []string
	get, err := Secret{File: path}.Rereading(func(err error) { told = append(told, err.Error()) })
	if err != nil {
		t.Fatal(err)
	}
	if v := get(); v != "first" {
		t.Fatalf("read %q", v)
	}
	os.WriteFile(path, []byte("second\n"), 0o600)
	if v := get(); v != "second" {
		t.Fatalf("after the file changed: %q", v)
	}
	os.Chmod(path, 0o644)
	for range 3 {
		if v := get(); v != "second" {
			t.Fatalf("while the file may be read by others: %q", v)
		}
	}
	os.Chmod(path, 0o600)
	os.WriteFile(path, nil, 0o600)
	if v := get(); v != "second" {
		t.Fatalf("while the file is empty: %q", v)
	}
	os.Remove(path)
	if v := get(); v != "second" {
		t.Fatalf("while the file is gone: %q", v)
	}
	if len(told) != 3 || !strings.Contains(told[0], "chmod 600 "+path) || !strings.Contains(told[1], "is empty") || !strings.Contains(told[2], "no such file") {
		t.Errorf("told %d times, want the mode, the empty file and the file gone once each: %q", len(told), told)
	}
	if _, err := (Secret{File: path}).Rereading(nil); err == nil {
		t.Fatal("a secret whose file is gone at start was taken")
	}
	t.Setenv("SY_TEST_REREAD", "env")
	get, err = Secret{Env: "SY_TEST_REREAD"}.Rereading(nil)
	if err != nil || get() != "env" {
		t.Fatalf("%v", err)
	}
}

// A client certificate renewed in its files (cert-manager, certbot) is
// presented at the next handshake, with no restart; a renewal that does
// not load (the certificate written, not yet its key) leaves the last
// pair presented, and is told once, not at every handshake.
func TestARenewedClientCertificateIsPresented(t *testing.T) {
	ca := testkit.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key")
	ca.ClientPair(t, "first", certFile, keyFile)
	var warned []error
	tc, err := (&TLS{CAFile: ca.File, CertFile: certFile, KeyFile: keyFile}).ClientConfig(func(err error) { warned = append(warned, err) })
	if err != nil {
		t.Fatal(err)
	}
	presented := clientNames(t, ca)
	handshake := func() string { return presented.handshake(t, tc) }
	if got := handshake(); got != "first" {
		t.Fatalf("presented %q", got)
	}
	renewed := time.Now().Add(time.Minute) // a size alike would not tell the change
	ca.ClientPair(t, "second", certFile, keyFile)
	os.Chtimes(certFile, renewed, renewed)
	if got := handshake(); got != "second" {
		t.Fatalf("after the renewal, presented %q", got)
	}
	other := t.TempDir()
	ca.ClientPair(t, "third", filepath.Join(other, "c.pem"), filepath.Join(other, "c.key"))
	b, _ := os.ReadFile(filepath.Join(other, "c.pem"))
	os.WriteFile(certFile, b, 0o644) // the certificate written, its key not yet
	if got := handshake(); got != "second" {
		t.Fatalf("with a certificate that is not its key's, presented %q", got)
	}
	if got := handshake(); got != "second" || len(warned) != 1 {
		t.Fatalf("presented %q; told %d times: %v", got, len(warned), warned)
	}
	k, _ := os.ReadFile(filepath.Join(other, "c.key"))
	os.WriteFile(keyFile, k, 0o600)
	if got := handshake(); got != "third" {
		t.Fatalf("once the key is written too, presented %q", got)
	}
}

// clientServer is a TLS server that sends the name in each client
// certificate it gets on names ("none" without one).
type clientServer struct {
	addr  string
	names chan string
}

// clientNames is a clientServer that asks each client for a certificate
// ca signed.
func clientNames(t *testing.T, ca *testkit.CA) clientServer {
	t.Helper()
	return serveNames(t, ca.RequireClients(ca.ServerTLS(t)))
}

func serveNames(t *testing.T, st *tls.Config) clientServer {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := clientServer{addr: ln.Addr().String(), names: make(chan string, 1)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			switch err := tc.Handshake(); {
			case err != nil:
				s.names <- "refused: " + err.Error()
			case len(tc.ConnectionState().PeerCertificates) == 0:
				s.names <- "none"
			default:
				s.names <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
			}
			c.Close()
		}
	}()
	return s
}

// handshake connects with ct's next configuration and returns what the
// server saw.
func (s clientServer) handshake(t *testing.T, ct *ClientTLS) string {
	t.Helper()
	c, err := tls.Dial("tcp", s.addr, ct.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	return <-s.names
}

// A renewed key written with a mode CheckPrivate refuses is presented once
// the operator runs the chmod its warning asks for: a chmod changes
// neither the file's size nor its time, and the old pair was presented
// until a restart (a review).
func TestARenewedKeyFixedByChmodIsPresented(t *testing.T) {
	ca := testkit.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key")
	ca.ClientPair(t, "first", certFile, keyFile)
	warned := 0
	tc, err := (&TLS{CAFile: ca.File, CertFile: certFile, KeyFile: keyFile}).ClientConfig(func(error) { warned++ })
	if err != nil {
		t.Fatal(err)
	}
	presented := clientNames(t, ca)
	ca.ClientPair(t, "second", certFile, keyFile)
	renewed := time.Now().Add(time.Minute)
	os.Chtimes(certFile, renewed, renewed)
	os.Chmod(keyFile, 0o644) // as a renewal tool under umask 022 writes it
	if got := presented.handshake(t, tc); got != "first" || warned != 1 {
		t.Fatalf("with the renewed key readable by others, presented %q, told %d times", got, warned)
	}
	os.Chmod(keyFile, 0o600)
	if got := presented.handshake(t, tc); got != "second" {
		t.Fatalf("after chmod 600, presented %q", got)
	}
}

// A server that asks, optionally, for a certificate of other CAs than the
// client's gets none and lets the client in, as with
// tls.Config.Certificates (a review: the handshake failed with "unknown
// certificate authority").
func TestAServerAskingForOtherCAsGetsNoCertificate(t *testing.T) {
	ca, other := testkit.NewCA(t), testkit.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key")
	ca.ClientPair(t, "mine", certFile, keyFile)
	tc, err := (&TLS{CAFile: ca.File, CertFile: certFile, KeyFile: keyFile}).ClientConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(other.File)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	st := ca.ServerTLS(t)
	st.ClientAuth, st.ClientCAs = tls.VerifyClientCertIfGiven, pool
	srv := serveNames(t, st)
	if got := srv.handshake(t, tc); got != "none" {
		t.Fatalf("the server asking for other CAs' certificates got %q", got)
	}
}

// A CA file renewed in place is trusted at the next handshake, with no
// restart: a server whose certificate moved to a new CA is reached once
// the file holds that CA (it was read at start only: a bundle renewed by
// cert-manager left the client refusing the server until a restart). A
// rewrite that does not load (no certificate in it, a mode anyone may
// write) leaves the roots read before, and is told once.
func TestARenewedCAFileIsTrusted(t *testing.T) {
	first, second := testkit.NewCA(t), testkit.NewCA(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	testkit.WriteCAFile(t, caFile, first)
	var warned []string
	ct, err := (&TLS{CAFile: caFile}).ClientConfig(func(err error) { warned = append(warned, err.Error()) })
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, renew := testkit.RenewableServerTLS(t, first)
	srv := serveNames(t, serverTLS)
	dial := func() error {
		c, err := tls.Dial("tcp", srv.addr, ct.Config())
		if err == nil {
			c.Close()
		}
		<-srv.names
		return err
	}
	if err := dial(); err != nil {
		t.Fatalf("the server of the CA in the file: %v", err)
	}
	renew(second)
	if err := dial(); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("the server of a CA not in the file: %v", err)
	}
	testkit.WriteCAFile(t, caFile, second)
	if err := dial(); err != nil {
		t.Fatalf("after the CA file was renewed: %v", err)
	}
	os.WriteFile(caFile, []byte("not a certificate\n"), 0o644)
	for range 2 {
		if err := dial(); err != nil {
			t.Fatalf("with a CA file that holds no certificate, the roots read before: %v", err)
		}
	}
	testkit.WriteCAFile(t, caFile, second)
	os.Chmod(caFile, 0o666)
	if err := dial(); err != nil {
		t.Fatalf("with a CA file anyone may write, the roots read before: %v", err)
	}
	if len(warned) != 2 || !strings.Contains(warned[0], "no PEM certificates found") || !strings.Contains(warned[1], "may be written by anyone") {
		t.Fatalf("told %d times, want the file without a certificate and the mode once each: %q", len(warned), warned)
	}
	if roots, _ := ct.Roots(); roots == nil || len(warned) != 2 {
		t.Fatalf("Roots gave %v, told %d times", roots, len(warned))
	}
}

// A file's stamp changes when only its inode does (a chown to the same
// owner here; an ACL removed, which CheckPrivate's warning may ask for,
// does the same), so a pair refused for its permissions is read again
// once they are fixed (a review: ACL removal left the old pair presented).
func TestAFilesStampSeesItsInodeChange(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("SKIPPED: the ctime is read on Linux only")
	}
	path := testkit.SecretFile(t, "key")
	before := stampOf(path)
	time.Sleep(10 * time.Millisecond)
	if err := os.Chown(path, os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	if stampOf(path) == before {
		t.Fatal("a change of the inode alone left the stamp as it was")
	}
}
