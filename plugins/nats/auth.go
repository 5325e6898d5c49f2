package nats

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"

	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/internal/fsperm"
)

// ClientOptions are the nats.go options that authenticate a client of the
// server of cfg (credentials, TLS): the sink, the inbox source, `router
// validate -check-sinks` and the tests all connect with them. Errors name
// the file or variable that is wrong, never a secret. A password or token
// or creds file is read again at each connection attempt, a client
// certificate when its files change (config.Secret.Rereading,
// TLS.ClientConfig); an nkey seed once (nkeyOption). log (nil:
// none) hears of a changed file that cannot be used (config.FileWarning).
func ClientOptions(cfg config.NATS, log hclog.Logger) ([]natsgo.Option, error) {
	var opts []natsgo.Option
	a := cfg.Auth
	if log == nil {
		log = hclog.NewNullLogger()
	}
	warn := config.FileWarning(log.Warn, cfg.SinkName())
	switch {
	case a.User != "":
		pass, err := a.Password.Rereading(warn)
		if err != nil {
			return nil, fmt.Errorf("password: %w", err)
		}
		opts = append(opts, natsgo.UserInfoHandler(func() (string, string) { return a.User, pass() }))
	case a.Token.IsSet():
		tok, err := a.Token.Rereading(warn)
		if err != nil {
			return nil, fmt.Errorf("token: %w", err)
		}
		opts = append(opts, natsgo.TokenHandler(tok))
	case a.CredsFile != "":
		opt, err := credsOption(a.CredsFile, warn)
		if err != nil {
			return nil, fmt.Errorf("creds_file: %w", err)
		}
		opts = append(opts, opt)
	case a.NKeySeedFile != "":
		opt, err := nkeyOption(a.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nkey_seed_file: %w", err)
		}
		opts = append(opts, opt)
	}
	if cfg.TLS != nil {
		ct, err := cfg.TLS.ClientConfig(warn)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		// The roots again at each connection: a renewed CA file is trusted.
		opts = append(opts, natsgo.Secure(ct.Config()), natsgo.ClientTLSConfig(nil, ct.Roots))
	}
	return opts, nil
}

// nkeyOption authenticates with the nkey seed of the file at path, read
// once: the public key the server is told and the seed that signs its
// nonce come from that read, and a changed file is used from the next
// start (README). nats.go's NkeyOptionFromSeed reads the file again at
// each connection to sign, with the public key of the start: a seed
// rotated in place signed for another key, and the server refused every
// reconnection until a restart; a file made readable by others after the
// start was read all the same. The seed stays in memory, as a creds
// file's does (credsOption).
func nkeyOption(path string) (natsgo.Option, error) {
	if err := config.CheckPrivate(path); err != nil {
		return nil, err
	}
	seed, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	kp, err := nkeys.ParseDecoratedNKey(seed)
	clear(seed)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return nil, fmt.Errorf("%s: not a user's nkey seed (SU...)", path)
	}
	return natsgo.Nkey(pub, kp.Sign), nil
}

// credsOption authenticates with the user JWT and seed of the creds file
// at path (nsc's .creds), read again at each connection attempt as
// nats.go's UserCredentials reads it, but as a secret: a file rewritten
// with a mode others may read, or with what is not a user's creds, is not
// used (the last that was is) and warn hears why, once (a review: nats.go
// read a creds file made 0644 after the start). The seed signs with the
// same read as the JWT sent: a file rotated between the two would sign for
// another user.
func credsOption(path string, warn func(error)) (natsgo.Option, error) {
	creds, err := config.Secret{File: path}.RereadingAs(parseCreds, warn)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var sent string // the creds whose JWT the connection sent last
	user := func() (string, error) {
		mu.Lock()
		sent = creds()
		mu.Unlock()
		return nkeys.ParseDecoratedJWT([]byte(sent))
	}
	sign := func(nonce []byte) ([]byte, error) {
		mu.Lock()
		v := sent
		mu.Unlock()
		kp, err := nkeys.ParseDecoratedUserNKey([]byte(v))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		defer kp.Wipe()
		return kp.Sign(nonce)
	}
	return natsgo.UserJWT(user, sign), nil
}

// parseCreds refuses what is not a user's creds: a user JWT and the seed
// of that user. nkeys takes a file without the JWT's block for a JWT
// whole, so a seed alone (an nkey_seed_file named as creds_file) would be
// sent to the server as the JWT.
func parseCreds(v string) error {
	token, err := nkeys.ParseDecoratedJWT([]byte(v))
	if err != nil {
		return err
	}
	claims, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return fmt.Errorf("no user JWT in it: %w", err)
	}
	kp, err := nkeys.ParseDecoratedUserNKey([]byte(v))
	if err != nil {
		return fmt.Errorf("no user seed in it: %w", err)
	}
	defer kp.Wipe()
	if pub, err := kp.PublicKey(); err != nil || pub != claims.Subject {
		return fmt.Errorf("its seed is not the JWT's user's (%s)", claims.Subject)
	}
	return nil
}

// serverUsers is the one user an embedded server admits: the router's,
// with the password of cfg.Auth, which is generated on first start when
// its file does not exist yet. A server without users would admit any
// local process (docs/decisions/embedded-broker-auth.md).
func serverUsers(cfg config.NATS, dataDir string) ([]*server.User, error) {
	if cfg.Auth.User == "" || !cfg.Auth.Password.IsSet() {
		return nil, errors.New("an embedded server needs a user and a password file (config resolves them)")
	}
	if f := cfg.Auth.Password.File; f != "" {
		// The file the router generates beside its data file: nothing
		// another user put there is taken. A file the operator named
		// elsewhere (a Kubernetes secret's link) is checked as a secret
		// (config.CheckPrivate, on reading).
		if filepath.Dir(filepath.Clean(f)) == filepath.Clean(dataDir) {
			if err := fsperm.CheckMade(f); err != nil {
				return nil, fmt.Errorf("password: %w", err)
			}
		}
		if err := generatePassword(f); err != nil {
			return nil, err
		}
	}
	pass, err := cfg.Auth.Password.Read()
	if err != nil {
		return nil, fmt.Errorf("password: %w", err)
	}
	// The server keeps only a bcrypt hash (it warns about a plaintext
	// one). The lowest cost is enough: the password is 256 random bits,
	// not something a person chose, so slowing a guess adds nothing.
	hash, err := bcrypt.GenerateFromPassword([]byte(pass), bcrypt.MinCost)
	if err != nil {
		return nil, err
	}
	return []*server.User{{Username: cfg.Auth.User, Password: string(hash)}}, nil
}

// generatePassword writes 32 random bytes, base64url, to path with mode
// 0600 unless the file exists. O_EXCL: a file that appears meanwhile (or a
// link planted there) is never overwritten.
func generatePassword(path string) error {
	if _, err := os.Lstat(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := fsperm.CheckDir(filepath.Dir(path)); err != nil {
		return err
	}
	b := make([]byte, 32)
	rand.Read(b)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = f.WriteString(base64.RawURLEncoding.EncodeToString(b) + "\n")
	return errors.Join(err, f.Sync(), f.Close())
}

// dial connects to url. A server that is not there, or refuses the
// credentials, does not fail it: the connection then keeps trying in the
// background (RetryOnFailedConnect, every reconnectWait), and onFail learns
// why the first try failed. Only what retrying cannot fix (a malformed URL)
// is an error.
func dial(url string, opts []natsgo.Option, onFail func(error)) (*natsgo.Conn, error) {
	nc, err := natsgo.Connect(url, opts...)
	if err == nil {
		return nc, nil
	}
	onFail(err)
	return natsgo.Connect(url, append(opts, natsgo.RetryOnFailedConnect(true))...)
}
