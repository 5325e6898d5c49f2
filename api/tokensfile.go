package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/internal/fsperm"
	"github.com/switchyard-router/switchyard/storage"
)

// tokenJSON is one entry of a tokens_file:
//
//	{"tokens": [{"token": "...", "tenant": "acme"}, {"sha256": "<hex>", "admin": true}]}
type tokenJSON struct {
	Token  string `json:"token"`
	SHA256 string `json:"sha256"`
	Tenant string `json:"tenant"`
	Admin  bool   `json:"admin"`
}

// LoadTokens reads a tokens_file. Every problem is an error: a router with
// a TCP listener does not start on tokens it does not understand.
func LoadTokens(path string) (*Tokens, error) {
	if err := config.CheckPrivate(path); err != nil {
		return nil, fmt.Errorf("tokens_file: %w", err)
	}
	b, err := fsperm.ReadFile(path, fsperm.MaxSecretFile, "a tokens file")
	if err != nil {
		return nil, fmt.Errorf("tokens_file: %w", err)
	}
	return ParseTokens(b, path)
}

// ParseTokens parses the tokens_file format; name is used in errors, each
// with the line and column it is about (name:line:col, as config's).
func ParseTokens(b []byte, name string) (*Tokens, error) {
	entries, at, err := readTokens(b)
	if err != nil {
		return nil, fmt.Errorf("tokens_file %s:%s: %v", name, lineCol(b, at), err)
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("tokens_file %s: no tokens", name)
	}
	t := &Tokens{}
	seen := make(map[[sha256.Size]byte]int64)
	for i, e := range entries {
		en, err := e.entry()
		if err == nil {
			if first, dup := seen[en.digest]; dup {
				err = fmt.Errorf("the same token as at %s", lineCol(b, first))
			}
		}
		if err != nil {
			return nil, fmt.Errorf("tokens_file %s:%s: token %d: %v", name, lineCol(b, e.at), i+1, err)
		}
		seen[en.digest] = e.at
		t.entries = append(t.entries, en)
	}
	t.tenants = countTenants(t.entries)
	return t, nil
}

// countTenants is how many tenants the entries that are not admin name.
func countTenants(entries []tokenEntry) int {
	seen := map[string]bool{}
	for _, e := range entries {
		if !e.admin {
			seen[e.tenant] = true
		}
	}
	return len(seen)
}

// entry checks e and makes it a tokenEntry.
func (e *tokenAt) entry() (en tokenEntry, err error) {
	switch {
	case e.Token != "" && e.SHA256 != "":
		return en, errors.New("set token or sha256, not both")
	case e.Token != "":
		if utf8.RuneCountInString(e.Token) < minTokenLen {
			return en, fmt.Errorf("shorter than %d characters", minTokenLen)
		}
		if strings.TrimSpace(e.Token) != e.Token || strings.ContainsFunc(e.Token, unicode.IsControl) {
			// bearer trims the header's ends, and a header holds no
			// control character: such a token could never sign in, and
			// loaded unsaid (a trial). Spaces within and UTF-8 do.
			return en, errors.New("begins or ends with white space, or holds a control character: no Authorization header carries it whole")
		}
		en.digest = sha256.Sum256([]byte(e.Token))
	case e.SHA256 != "":
		d, err := hex.DecodeString(e.SHA256)
		if err != nil || len(d) != sha256.Size {
			return en, errors.New("sha256 must be 64 hex digits")
		}
		copy(en.digest[:], d)
	default:
		return en, errors.New("no token (or sha256)")
	}
	en.tenant, en.admin = e.Tenant, e.Admin
	if en.tenant == "" {
		if !en.admin {
			return en, errors.New(`a tenant is required (admin tokens default to "default")`)
		}
		en.tenant = storage.DefaultTenant
	}
	if err := switchyard.CheckTenant(en.tenant); err != nil {
		return en, fmt.Errorf("tenant %q: %v", en.tenant, err)
	}
	return en, nil
}

// tokenAt is an entry with the offset in the file it starts at.
type tokenAt struct {
	tokenJSON
	at int64
}

// readTokens reads b's entries, each with its offset; on an error, at is
// the offset it is about.
func readTokens(b []byte) (entries []tokenAt, at int64, err error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	fail := func(err error) ([]tokenAt, int64, error) {
		if syntax := (*json.SyntaxError)(nil); errors.As(err, &syntax) {
			return nil, syntax.Offset, err
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = errors.New("the file ends before its object does")
		}
		at := dec.InputOffset()
		if errors.As(err, new(unexpected)) {
			at-- // at the delimiter read, not past it
		}
		return nil, at, err
	}
	if err := want(dec, json.Delim('{'), `the file holds one object, {"tokens": [...]}`); err != nil {
		return fail(err)
	}
	listed := false
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return fail(err)
		}
		switch {
		case !strings.EqualFold(fmt.Sprint(k), "tokens"): // encoding/json's match, as before
			return fail(fmt.Errorf(`field %q: the file holds one object with one field, "tokens"`, k))
		case listed:
			return fail(errors.New(`"tokens" appears twice: put every token in one list`))
		}
		listed = true
		if err := want(dec, json.Delim('['), `"tokens" is a list: [{"token": ..., "tenant": ...}, ...]`); err != nil {
			return fail(err)
		}
		for dec.More() {
			var e tokenAt
			e.at = valueStart(b, dec.InputOffset())
			if err := dec.Decode(&e.tokenJSON); err != nil {
				if syntax := (*json.SyntaxError)(nil); errors.As(err, &syntax) {
					return fail(err) // where the syntax breaks, not where the entry starts
				}
				return nil, e.at, entryError(len(entries)+1, err)
			}
			entries = append(entries, e)
		}
		if _, err := dec.Token(); err != nil { // ]
			return fail(err)
		}
	}
	if _, err := dec.Token(); err != nil { // }
		return fail(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fail(errors.New("more after the object"))
	}
	return entries, 0, nil
}

// entryError says why the n-th entry did not decode: where it starts is
// the place given.
func entryError(n int, err error) error {
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &typ) && typ.Field == "":
		return fmt.Errorf(`token %d: an object {"token": ..., "tenant": ...}, not a JSON %s`, n, typ.Value)
	case errors.As(err, &typ):
		return fmt.Errorf("token %d: %q is a %s, not a JSON %s", n, typ.Field, typ.Type, typ.Value)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("token %d: the file ends before it does", n)
	}
	return fmt.Errorf("token %d: %s", n, strings.TrimPrefix(err.Error(), "json: "))
}

// want reads the next token and says what the file should hold when it is
// not d.
func want(dec *json.Decoder, d json.Delim, what string) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if t != d {
		return unexpected(what)
	}
	return nil
}

// unexpected is want's error: the file holds another token there.
type unexpected string

func (u unexpected) Error() string { return string(u) }

// valueStart is where the value after off starts: past the white space and
// the comma that a decoder's InputOffset leaves before it.
func valueStart(b []byte, off int64) int64 {
	for off < int64(len(b)) && bytes.IndexByte([]byte(" \t\r\n,"), b[off]) >= 0 {
		off++
	}
	return off
}

// lineCol is "line:col" of offset off in b, both from 1 (col in bytes).
func lineCol(b []byte, off int64) string {
	off = min(max(off, 0), int64(len(b)))
	line := bytes.Count(b[:off], []byte{'\n'}) + 1
	col := off - int64(bytes.LastIndexByte(b[:off], '\n'))
	return fmt.Sprintf("%d:%d", line, col)
}
