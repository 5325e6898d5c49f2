package config

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/switchyard-router/switchyard/internal/fsperm"
)

// Rereading reads the secret, and returns what gives it at each use (a
// connection attempt): a secret in a file is read again each time, so a
// password or token corrected or rotated in its file is used at the next
// connection, with no restart (a trial fixed the file, reloaded, and the
// router kept the refused one). While the file cannot be used (mid-edit,
// or refused for its mode: a new file written under umask 022) the last
// value read is, and warn (nil: none) hears why, once per cause (a
// trial: the old password went on silently, the broker's refusal the only
// sign).
func (s Secret) Rereading(warn func(error)) (func() string, error) {
	return s.RereadingAs(nil, warn)
}

// RereadingAs is Rereading for a secret whose value must also parse (nil:
// any value does): a file rewritten with what does not parse (a creds file
// cut short) is not used, as one refused for its mode is not.
func (s Secret) RereadingAs(parse func(string) error, warn func(error)) (func() string, error) {
	read := s.Read
	if parse != nil {
		read = func() (string, error) {
			v, err := s.Read()
			if err == nil {
				err = parse(v)
			}
			return v, err
		}
	}
	first, err := read()
	if err != nil {
		return nil, err
	}
	if s.File == "" {
		return func() string { return first }, nil
	}
	var mu sync.Mutex
	last, said := first, ""
	return func() string {
		mu.Lock()
		v, err := read()
		var tell error
		switch {
		case err == nil:
			last, said = v, ""
		case err.Error() != said:
			said, tell = err.Error(), fmt.Errorf("%s cannot be used (the value read before is): %w", s.File, err)
		}
		v = last
		mu.Unlock()
		if tell != nil && warn != nil {
			warn(tell) // not under mu: a slow log would hold every attempt
		}
		return v
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

// fileStamp is what says a file changed: its size and modification time,
// and its mode and owner, which CheckPrivate reads: a renewed key written
// 0644 is refused, and the chmod 600 its warning asks for changes neither
// size nor time (a review: the old pair was presented until a restart);
// on Linux its ctime and inode too, which an ACL removed (setfacl -b, the
// other fix CheckPrivate asks for) or a file renamed in change.
type fileStamp struct {
	size  int64
	mod   time.Time
	mode  os.FileMode
	owner int
	ctime int64
	ino   uint64
}

func stampOf(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{size: -1}
	}
	uid, _ := fsperm.Owner(fi)
	ctime, ino := fsperm.Changed(fi)
	return fileStamp{fi.Size(), fi.ModTime(), fi.Mode(), uid, ctime, ino}
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
// files changed since it was, when the server takes it (as with
// tls.Config.Certificates: a server asking, optionally, for a certificate
// of other CAs gets none and may still let the client in).
func (k *keyPair) get(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
	cert, err := k.current()
	if err != nil && k.warn != nil {
		k.warn(err) // not under k.mu: a slow log would hold every handshake
	}
	if cri.SupportsCertificate(cert) != nil {
		return new(tls.Certificate), nil
	}
	return cert, nil
}

// current is the pair, read again if its files changed since it was; the
// last that loaded, with why, when they changed and do not load.
func (k *keyPair) current() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.stamps()
	if now == k.loaded || now == k.tried {
		return k.last, nil
	}
	k.tried = now
	cert, err := k.load()
	if err != nil {
		return k.last, fmt.Errorf("the client certificate %s and key %s changed but do not load (the one read before is presented): %w", k.certFile, k.keyFile, err)
	}
	k.last, k.loaded = cert, now
	return cert, nil
}

// FileWarning is the warn of Secret.Rereading and TLS.ClientConfig for a
// sink's clients: warn (a logger's Warn) names the sink.
func FileWarning(warn func(msg string, args ...any), sink string) func(error) {
	return func(err error) { warn("a credential file changed but cannot be used", "sink", sink, "error", err) }
}
