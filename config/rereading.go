package config

import (
	"crypto/tls"
	"fmt"
	"os"
	"slices"
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
// one sat on disk could not reconnect.
type keyPair struct {
	*fileBacked[*tls.Certificate]
	warn func(error)
}

// newKeyPair loads the pair; it fails if the files do not load now.
func newKeyPair(certFile, keyFile string, warn func(error)) (*keyPair, error) {
	load := func() (*tls.Certificate, error) {
		if err := CheckPrivate(keyFile); err != nil {
			return nil, fmt.Errorf("key_file: %w", err)
		}
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		return &cert, nil
	}
	what := fmt.Sprintf("the client certificate %s and key %s", certFile, keyFile)
	f, err := newFileBacked(what, "presented", load, certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &keyPair{f, warn}, nil
}

// get is tls.Config.GetClientCertificate: the pair, read again if its
// files changed since it was, when the server takes it (as with
// tls.Config.Certificates: a server asking, optionally, for a certificate
// of other CAs gets none and may still let the client in).
func (k *keyPair) get(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
	cert, err := k.current()
	if err != nil && k.warn != nil {
		k.warn(err) // not under the lock: a slow log would hold every handshake
	}
	if cri.SupportsCertificate(cert) != nil {
		return new(tls.Certificate), nil
	}
	return cert, nil
}

// fileBacked is a value loaded from files, loaded again when they change
// (fileStamp). While they do not load (a renewed certificate written, its
// key not yet; a file refused for its mode) the last value that did is
// given, with why once per change of the files, not at every use.
type fileBacked[T any] struct {
	what, used string // what the files hold, and what is done with the last value, for the error
	load       func() (T, error)
	paths      []string

	mu     sync.Mutex
	loaded []fileStamp // the files as they were when last read
	tried  []fileStamp // ... when last tried, whether they loaded or not
	last   T
}

// newFileBacked loads the value; it fails if the files do not load now.
func newFileBacked[T any](what, used string, load func() (T, error), paths ...string) (*fileBacked[T], error) {
	f := &fileBacked[T]{what: what, used: used, load: load, paths: paths}
	f.loaded = f.stamps()
	v, err := load()
	if err != nil {
		return nil, err
	}
	f.last, f.tried = v, f.loaded
	return f, nil
}

func (f *fileBacked[T]) stamps() []fileStamp {
	s := make([]fileStamp, len(f.paths))
	for i, p := range f.paths {
		s[i] = stampOf(p)
	}
	return s
}

// current is the value, loaded again if its files changed since it was;
// the last that loaded, with why, when they changed and do not load.
func (f *fileBacked[T]) current() (T, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.stamps()
	if slices.Equal(now, f.loaded) || slices.Equal(now, f.tried) {
		return f.last, nil
	}
	f.tried = now
	v, err := f.load()
	if err != nil {
		return f.last, fmt.Errorf("%s changed but cannot be used (the one read before is %s): %w", f.what, f.used, err)
	}
	f.last, f.loaded = v, now
	return v, nil
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

// FileWarning is the warn of Secret.Rereading and TLS.ClientConfig for a
// sink's clients: warn (a logger's Warn) names the sink.
func FileWarning(warn func(msg string, args ...any), sink string) func(error) {
	return func(err error) { warn("a credential file changed but cannot be used", "sink", sink, "error", err) }
}
