package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/switchyard-router/switchyard/internal/fsperm"
)

// Read returns the secret: the file's content less trailing newlines, or
// the environment variable's value. A file that others than its owner may
// read is refused, as ssh refuses such a key: a secret is only as private
// as its file.
func (s Secret) Read() (string, error) {
	switch {
	case s.File != "":
		if err := CheckPrivate(s.File); err != nil {
			return "", err
		}
		b, err := os.ReadFile(s.File)
		if err != nil {
			return "", err
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return "", fmt.Errorf("%s is empty", s.File)
		}
		return v, nil
	case s.Env != "":
		v, ok := os.LookupEnv(s.Env)
		if !ok || v == "" {
			return "", fmt.Errorf("the environment variable %s is not set", s.Env)
		}
		return v, nil
	}
	return "", errors.New("no secret configured")
}

// CheckPrivate refuses a file that anyone but its owner may read or write
// (any of the mode bits 0077), or that is owned by another user than the
// router's (root excepted), as ssh refuses such a key: a file of secrets is
// only as private as its mode, and one another user owns is theirs to
// choose (a password planted in a directory they could write, say).
func CheckPrivate(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s may be read by others than its owner (mode %04o): chmod 600 %s", path, perm, path)
	}
	if err := fsperm.CheckOwner(path, fi); err != nil {
		return fmt.Errorf("%w: a secret must be the router's own (chown it)", err)
	}
	return nil
}

// ClientConfig is the crypto/tls configuration of a tls block: TLS 1.2 or
// later, the CA file's certificates as roots (the system's without one),
// and the client certificate when one is set. Its key file is checked as
// every file of secrets is (CheckPrivate).
func (t *TLS) ClientConfig() (*tls.Config, error) {
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: t.InsecureSkipVerify, //nolint:gosec // an explicit operator choice
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificates found", t.CAFile)
		}
		tc.RootCAs = pool
	}
	switch {
	case t.CertFile != "" && t.KeyFile != "":
		if err := CheckPrivate(t.KeyFile); err != nil {
			return nil, fmt.Errorf("key_file: %w", err)
		}
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	case t.CertFile != "" || t.KeyFile != "":
		return nil, errors.New("cert_file and key_file must be set together")
	}
	return tc, nil
}
