package nats

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/internal/testkit"
)

// jwtServer starts a nats-server that trusts one operator and knows one
// of its accounts (in memory, as nsc's resolver would serve it), and
// returns it with a maker of creds files for users of that account: the
// content, and the user's public key.
func jwtServer(t *testing.T) (*server.Server, func(name string) (creds []byte, user string)) {
	t.Helper()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	operator, err := nkeys.CreateOperator()
	must(err)
	opub, _ := operator.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	account, err := nkeys.CreateAccount()
	must(err)
	apub, _ := account.PublicKey()
	ajwt, err := jwt.NewAccountClaims(apub).Encode(operator)
	must(err)
	resolver := &server.MemAccResolver{}
	must(resolver.Store(apub, ajwt))
	srv := testkit.NATS(t, func(o *server.Options) { o.TrustedOperators, o.AccountResolver = []*jwt.OperatorClaims{oc}, resolver })
	return srv, func(name string) ([]byte, string) {
		u, err := nkeys.CreateUser()
		must(err)
		upub, _ := u.PublicKey()
		uc := jwt.NewUserClaims(upub)
		uc.Name = name
		ujwt, err := uc.Encode(account)
		must(err)
		seed, _ := u.Seed()
		creds, err := jwt.FormatUserConfig(ujwt, seed)
		must(err)
		return creds, upub
	}
}

// connectedAs is the public key of the user each client of srv connected
// as, after the server closed every connection it had (they reconnect).
func connectedAs(t *testing.T, srv *server.Server, want string) {
	t.Helper()
	before, err := srv.Connz(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range before.Conns {
		srv.DisconnectClientByID(c.Cid)
	}
	var got []string
	testkit.EventuallyWith(t, 15*time.Second, func() bool {
		now, err := srv.Connz(&server.ConnzOptions{Username: true})
		if err != nil || len(now.Conns) == 0 || now.Conns[0].Cid == before.Conns[0].Cid {
			return false
		}
		got = got[:0]
		for _, c := range now.Conns {
			got = append(got, c.AuthorizedUser)
		}
		return len(got) == 1 && got[0] == want
	}, func() string { return "the sink reconnected as " + strings.Join(got, ", ") + ", not " + want })
}

// A creds file is read again at each connection, as a secret: rotated in
// place with a mode others may read, it is not used (the sink reconnects
// with the creds read before) and the log says to chmod it, once; made
// 0600, the rotated creds are used at the next connection. Cut short, the
// same.
func TestARotatedCredsFileIsReadAsASecret(t *testing.T) {
	srv, user := jwtServer(t)
	first, firstKey := user("first")
	file := testkit.SecretFile(t, string(first))
	cfg := externalConfig(srv.ClientURL(), config.NATSAuth{CredsFile: file}, nil)
	_, logs := openLogged(t, cfg)

	second, secondKey := user("second")
	tmp := filepath.Join(filepath.Dir(file), "new")
	if err := os.WriteFile(tmp, second, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(tmp, 0o644)
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	connectedAs(t, srv, firstKey)
	connectedAs(t, srv, firstKey)
	if l := logs.String(); strings.Count(l, "chmod 600 "+file) != 1 {
		t.Errorf("the creds file refused for its mode is not told once:\n%s", l)
	}
	os.Chmod(file, 0o600)
	connectedAs(t, srv, secondKey)

	if err := os.WriteFile(file, second[:len(second)/3], 0o600); err != nil {
		t.Fatal(err)
	}
	connectedAs(t, srv, secondKey)
	if l := logs.String(); !strings.Contains(l, "cannot be used (the value read before is)") || !strings.Contains(l, "no user JWT in it") {
		t.Errorf("the creds file cut short is not told:\n%s", l)
	}
}

// A creds file that is not a user's creds is refused at the start, saying
// why: a seed alone (nats.go sent the file to the server as the JWT) and a
// user's JWT with another user's seed.
func TestACredsFileMustBeAUsersCreds(t *testing.T) {
	srv, user := jwtServer(t)
	first, _ := user("first")
	own, err := nkeys.ParseDecoratedUserNKey(first)
	if err != nil {
		t.Fatal(err)
	}
	ownSeed, _ := own.Seed()
	other, _ := nkeys.CreateUser()
	seed, _ := other.Seed()
	mixed := strings.Replace(string(first), string(ownSeed), string(seed), 1)
	for content, want := range map[string]string{string(seed): "no user JWT in it", string(mixed): "is not the JWT's user's"} {
		cfg := externalConfig(srv.ClientURL(), config.NATSAuth{CredsFile: testkit.SecretFile(t, content)}, nil)
		if _, err := ClientOptions(cfg, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("creds_file of %.12s…: %v, want %q", content, err, want)
		}
	}
}

// An nkey seed file is read once, at the start: the public key the server
// is told and the seed that signs come from that read, so a seed rotated
// in place (or made readable by others) after the start leaves the sink
// reconnecting as the key it started with, until the next start (a
// leftover: nats.go read the file again at each connection to sign, with
// the start's public key, and the server refused every reconnection).
func TestAnNkeySeedIsReadAtTheStartOnly(t *testing.T) {
	first, _ := nkeys.CreateUser()
	firstKey, _ := first.PublicKey()
	firstSeed, _ := first.Seed()
	second, _ := nkeys.CreateUser()
	secondKey, _ := second.PublicKey()
	secondSeed, _ := second.Seed()
	srv := testkit.NATS(t, func(o *server.Options) {
		o.Nkeys = []*server.NkeyUser{{Nkey: firstKey}, {Nkey: secondKey}}
	})
	file := testkit.SecretFile(t, string(firstSeed))
	cfg := externalConfig(srv.ClientURL(), config.NATSAuth{NKeySeedFile: file}, nil)
	openLogged(t, cfg)

	if err := os.WriteFile(file, secondSeed, 0o600); err != nil {
		t.Fatal(err)
	}
	connectedAs(t, srv, firstKey)
	os.Chmod(file, 0o644)
	connectedAs(t, srv, firstKey)
}
