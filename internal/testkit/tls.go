package testkit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// ServerTLS returns a server TLS config with a certificate for 127.0.0.1
// signed by a throwaway CA, and the path of that CA's PEM file (for a tls
// block's ca_file).
func ServerTLS(t testing.TB) (*tls.Config, string) {
	t.Helper()
	ca := NewCA(t)
	return ca.ServerTLS(t), ca.File
}

// CA is a throwaway certificate authority for tests: its certificate is in
// File (PEM), and it signs server and client certificates.
type CA struct {
	File string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

var serial atomic.Int64

// NewCA makes a CA valid for the next hour.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	n := serial.Add(1)
	tmpl := &x509.Certificate{ // a name of its own: a server's list of CAs it takes names them
		SerialNumber: big.NewInt(n), Subject: pkix.Name{CommonName: fmt.Sprintf("switchyard test CA %d", n)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{File: filepath.Join(t.TempDir(), "ca.pem"), cert: cert, key: key, pool: x509.NewCertPool()}
	ca.pool.AddCert(cert)
	if err := os.WriteFile(ca.File, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return ca
}

// issue signs a certificate for tmpl's subject and a new key.
func (ca *CA) issue(t testing.TB, tmpl *x509.Certificate) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl.SerialNumber = big.NewInt(serial.Add(1))
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

// ServerTLS is a server config with a certificate for 127.0.0.1.
func (ca *CA) ServerTLS(t testing.TB) *tls.Config {
	t.Helper()
	der, key := ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
}

// RequireClients makes a server config ask for a client certificate this
// CA signed.
func (ca *CA) RequireClients(tc *tls.Config) *tls.Config {
	tc.ClientAuth, tc.ClientCAs = tls.RequireAndVerifyClientCert, ca.pool
	return tc
}

// ClientPair writes a client certificate for name and its key, as PEM, to
// certFile and keyFile (the key at mode 0600).
func (ca *CA) ClientPair(t testing.TB, name, certFile, keyFile string) {
	t.Helper()
	der, key := ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: name}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// WriteCAFile writes the certificates of cas to path (a tls block's
// ca_file: a bundle when more than one), mode 0644, its modification time
// a minute ahead, so that a reader that looks for a change sees one even
// when the size is alike.
func WriteCAFile(t testing.TB, path string, cas ...*CA) {
	t.Helper()
	var bundle []byte
	for _, ca := range cas {
		b, err := os.ReadFile(ca.File)
		if err != nil {
			t.Fatal(err)
		}
		bundle = append(bundle, b...)
	}
	if err := os.WriteFile(path, bundle, 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
}

// RenewableServerTLS is a server config that presents ca's certificate for
// 127.0.0.1, and renew, which moves it to a certificate of another CA from
// the next handshake on (a server whose certificate was renewed).
func RenewableServerTLS(t testing.TB, ca *CA) (cfg *tls.Config, renew func(*CA)) {
	t.Helper()
	var serving atomic.Pointer[tls.Certificate]
	serving.Store(&ca.ServerTLS(t).Certificates[0])
	cfg = &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return serving.Load(), nil }}
	return cfg, func(next *CA) { serving.Store(&next.ServerTLS(t).Certificates[0]) }
}
