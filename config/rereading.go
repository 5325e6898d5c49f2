package config

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// Rereading reads the secret, and returns what gives it at each use (a
// connection attempt): a secret in a file is read again each time (the
// last value read while the file cannot be: mid-edit), so a password or
// token corrected or rotated in its file is used at the next connection,
// with no restart (a trial fixed the file, reloaded, and the router kept
// the refused one).
func (s Secret) Rereading() (func() string, error) {
	first, err := s.Read()
	if err != nil {
		return nil, err
	}
	if s.File == "" {
		return func() string { return first }, nil
	}
	var mu sync.Mutex
	last := first
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		if v, err := s.Read(); err == nil {
			last = v
		}
		return last
	}, nil
}

// keyPair is a tls block's client certificate, read again when its files
// change: a certificate renewed in place (cert-manager, certbot, a cron
// job, every few weeks) is presented at the next connection, with no
// restart; a client whose certificate expired in memory while a renewed
// one sat on disk could not reconnect. While the files do not load (one
// written, not yet the other) the last pair that did is presented, and
// warn is told once per change of the files.
type keyPair struct {
	certFile, keyFile string
	warn              func(error)

	mu     sync.Mutex
	loaded [2]fileStamp // the files as they were when last read
	tried  [2]fileStamp // ... when last tried, whether they loaded or not
	last   *tls.Certificate
}

// fileStamp is what says a file changed: its size and modification time.
type fileStamp struct {
	size int64
	mod  time.Time
}

func stampOf(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{size: -1}
	}
	return fileStamp{fi.Size(), fi.ModTime()}
}

// newKeyPair loads the pair; it fails if the files do not load now.
func newKeyPair(certFile, keyFile string, warn func(error)) (*keyPair, error) {
	k := &keyPair{certFile: certFile, keyFile: keyFile, warn: warn}
	k.loaded = k.stamps()
	cert, err := k.load()
	if err != nil {
		return nil, err
	}
	k.last, k.tried = cert, k.loaded
	return k, nil
}

func (k *keyPair) stamps() [2]fileStamp {
	return [2]fileStamp{stampOf(k.certFile), stampOf(k.keyFile)}
}

func (k *keyPair) load() (*tls.Certificate, error) {
	if err := CheckPrivate(k.keyFile); err != nil {
		return nil, fmt.Errorf("key_file: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		return nil, err
	}
	return &cert, nil
}

// get is tls.Config.GetClientCertificate: the pair, read again if its
// files changed since it was.
func (k *keyPair) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.stamps()
	if now == k.loaded || now == k.tried {
		return k.last, nil
	}
	k.tried = now
	cert, err := k.load()
	if err != nil {
		if k.warn != nil {
			k.warn(fmt.Errorf("the client certificate %s and key %s changed but do not load (the one read before is presented): %w", k.certFile, k.keyFile, err))
		}
		return k.last, nil
	}
	k.last, k.loaded = cert, now
	return cert, nil
}
