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
// the environment variable's value. A file others may read or change is
// refused (CheckPrivate), as ssh and PostgreSQL refuse such a key: a
// secret is only as private as its file.
func (s Secret) Read() (string, error) {
	switch {
	case s.File != "":
		if err := CheckPrivate(s.File); err != nil {
			return "", err
		}
		b, err := fsperm.ReadFile(s.File, fsperm.MaxSecretFile, "a secret file")
		if err != nil {
			return "", err
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return "", fmt.Errorf("%s is empty", s.File)
		}
		return v, nil
	case s.Env != "":
		return LookupSecretEnv(s.Env)
	}
	return "", errors.New("no secret configured")
}

// LookupSecretEnv is the value of the environment variable name, which
// holds a secret: an error when it is not set, or is empty.
func LookupSecretEnv(name string) (string, error) {
	v, ok := os.LookupEnv(name)
	switch {
	case !ok:
		return "", fmt.Errorf("the environment variable %s is not set", name)
	case v == "":
		return "", fmt.Errorf("the environment variable %s is empty", name)
	}
	return v, nil
}

// CheckPrivate refuses a file of secrets that others may read or change:
// one owned by another user than the router's (root excepted), or whose
// mode lets in more than secretModeAllows. A file one another user owns is
// theirs to choose (a password planted in a directory they could write,
// say), and a secret is only as private as its mode
// (docs/decisions/file-permissions.md).
func CheckPrivate(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if err := fsperm.CheckOwner(path, fi); err != nil {
		return fmt.Errorf("%w: a secret must be the router's own (chown it)", err)
	}
	uid, ok := fsperm.Owner(fi)
	if !ok {
		uid = os.Geteuid() // no owner to read: the strict rule
	}
	euid, perm := os.Geteuid(), fi.Mode().Perm()
	if err := secretModeAllows(uid, euid, perm); err != nil {
		return fmt.Errorf("%s %w: %s", path, err, secretModeAdvice(path, fi, uid, euid))
	}
	if rootsForAnother(uid, euid) && perm&0o070 != 0 && fsperm.HasACL(path) {
		return fmt.Errorf("%s has an access ACL that names users or groups, so its group bits (mode %04o) are the ACL's mask, which may let named users and groups read it: remove the ACL (setfacl -b %s) and let in the router's group alone", path, perm, path)
	}
	return nil
}

// secretModeAllows says why perm lets too many read a secret owned by uid,
// for a router running as euid. PostgreSQL's rule for its key file, which
// ssh's (mode bits checked only on the user's own keys) also allows: the
// router's own file is 0600 or less; one root owns, for a router of
// another user, may be 0640, so that the common layout of a key shared
// through a group (root:ssl-cert 0640, the service in the group) needs no
// copy.
func secretModeAllows(uid, euid int, perm os.FileMode) error {
	switch {
	case rootsForAnother(uid, euid):
		if perm&0o037 != 0 {
			return fmt.Errorf("may be read by others than root and its group, or changed by its group (mode %04o; root's file may be 0640 at most)", perm)
		}
	case perm&0o077 != 0:
		return fmt.Errorf("may be read by others than its owner (mode %04o)", perm)
	}
	return nil
}

// rootsForAnother says whether a secret owned by uid is root's, read by a
// router of another user (euid): the case in which its group may read it.
func rootsForAnother(uid, euid int) bool { return uid == 0 && euid != 0 }

// secretModeAdvice says what to do about a mode secretModeAllows refused,
// so that the router can still read the file after it.
func secretModeAdvice(path string, fi os.FileInfo, uid, euid int) string {
	perm := fi.Mode().Perm()
	switch {
	case uid == 0 && euid == 0 && perm&0o077 == 0o040:
		// root:service 0640, checked by root: the service may read it.
		return fmt.Sprintf("a router run as root takes root's secrets at mode 0600 only; if the service runs as another user, which may read it through the file's group, run the router, and router validate, as that user (sudo -u USER), or chmod 600 %s", path)
	case rootsForAnother(uid, euid):
		if gid, ok := fsperm.Group(fi); ok && fsperm.InGroup(gid) {
			return "chmod 640 " + path
		}
		return fmt.Sprintf("chmod 640 %s and chgrp it to a group of the router's user, or give it to the router's user (chown, then chmod 600)", path)
	}
	return "chmod 600 " + path
}

// ClientTLS is a tls block made ready for a client's connections: TLS 1.2
// or later, the CA file's certificates as roots (the system's without
// one), and the client certificate when one is set. Every file is read
// again when it changes (fileBacked; warn, which may be nil, hears of a
// change that does not load): a CA bundle renewed (cert-manager's ca.crt,
// a new CA added before the servers' certificates move to it) is trusted
// at the next connection, as a renewed client certificate is presented,
// with no restart. Its key file is checked as every file of secrets is
// (CheckPrivate).
type ClientTLS struct {
	base  *tls.Config
	roots *fileBacked[*x509.CertPool] // nil without a ca_file
	warn  func(error)
}

// ClientConfig reads the tls block's files; it fails if one does not load.
func (t *TLS) ClientConfig(warn func(error)) (*ClientTLS, error) {
	c := &ClientTLS{base: &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: t.InsecureSkipVerify, //nolint:gosec // an explicit operator choice
	}, warn: warn}
	if t.CAFile != "" {
		roots, err := newFileBacked("the CA file "+t.CAFile, "trusted", func() (*x509.CertPool, error) { return readCAFile(t.CAFile) }, t.CAFile)
		if err != nil {
			return nil, err
		}
		c.roots = roots
	}
	switch {
	case t.CertFile != "" && t.KeyFile != "":
		pair, err := newKeyPair(t.CertFile, t.KeyFile, warn)
		if err != nil {
			return nil, err
		}
		c.base.GetClientCertificate = pair.get
	case t.CertFile != "" || t.KeyFile != "":
		return nil, errors.New("cert_file and key_file must be set together")
	}
	return c, nil
}

// Config is the configuration of the next connection, its roots the CA
// file's certificates as the file is now (or as it last loaded).
func (c *ClientTLS) Config() *tls.Config {
	tc := c.base.Clone()
	if c.roots != nil {
		tc.RootCAs, _ = c.Roots()
	}
	return tc
}

// Roots is the CA file's certificates as the file is now (or as it last
// loaded; warn hears why), nil without a ca_file: the roots of the next
// connection, for a client that takes them apart from Config (nats.go's
// RootCAsCB). It never fails.
func (c *ClientTLS) Roots() (*x509.CertPool, error) {
	if c.roots == nil {
		return nil, nil
	}
	pool, err := c.roots.current()
	if err != nil && c.warn != nil {
		c.warn(err)
	}
	return pool, nil
}

// readCAFile is the pool of a CA file's certificates; the file must be
// one only the router's user and root may change (fsperm.ReadTrusted).
func readCAFile(path string) (*x509.CertPool, error) {
	pem, err := fsperm.ReadTrusted(path, fsperm.MaxSecretFile, "a CA file")
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificates found", path)
	}
	return pool, nil
}
