package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Plugin state (docs/plugin-state.md): each plugin keeps keys and values
// in a namespace of its own (the plugin's name and the event type, or a
// shared name from the configuration), one per tenant (TenantNamespace).
//
//	state        ns ‖ 0 ‖ key → expires (u64 unix ns, 0 = never) ‖ value
//	state_exp    expires ‖ ns ‖ 0 ‖ key → nil      keys to forget
//	state_usage  ns → keys (u64) ‖ bytes (u64)     what each namespace holds
var (
	bucketState      = []byte("state")
	bucketStateExp   = []byte("state_exp")
	bucketStateUsage = []byte("state_usage")
)

// StateUsage is what a namespace holds: its keys, and the bytes of its keys
// and values.
type StateUsage struct {
	Keys, Bytes int64
}

// StateEntry is one key of a namespace.
type StateEntry struct {
	Key     []byte
	Value   []byte
	Expires time.Time // zero: never
}

// TenantNamespace is the namespace in which a tenant's events see base (a
// plugin's "<plugin>:<type>", or a shared state_namespace): base itself
// for the default tenant, so that a single-tenant data file looks as it
// always did, and "@<tenant>/<base>" for the others, the tenant
// path-escaped. A plugin never reads or writes another tenant's keys
// (docs/decisions/tenant-scope.md). base starts with a letter, digit, -
// or _ (config's names), never '@', and an escaped tenant holds no '/', so
// no two tenants share a namespace.
func TenantNamespace(tenant, base string) string {
	if tenant == "" || tenant == DefaultTenant {
		return base
	}
	return "@" + url.PathEscape(tenant) + "/" + base
}

// SplitTenantNamespace undoes TenantNamespace: the tenant and the base of
// ns (DefaultTenant for a namespace without one).
func SplitTenantNamespace(ns string) (tenant, base string) {
	if rest, ok := strings.CutPrefix(ns, "@"); ok {
		if esc, b, ok := strings.Cut(rest, "/"); ok {
			if t, err := url.PathUnescape(esc); err == nil {
				return t, b
			}
		}
	}
	return DefaultTenant, ns
}

func stateKey(ns string, key []byte) []byte {
	k := make([]byte, 0, len(ns)+1+len(key))
	k = append(append(append(k, ns...), 0), key...)
	return k
}

func decodeStateValue(v []byte) (expires time.Time, value []byte, err error) {
	if len(v) < 8 {
		return time.Time{}, nil, fmt.Errorf("storage: a state value of %d bytes", len(v))
	}
	if ns := binary.BigEndian.Uint64(v); ns != 0 {
		expires = time.Unix(0, int64(ns))
	}
	return expires, bytes.Clone(v[8:]), nil
}

// StateGet returns the value of key in ns, unless it is absent or expired.
func (tx *Tx) StateGet(ns string, key []byte, now time.Time) ([]byte, bool, error) {
	v := tx.bucket(bucketState).Get(stateKey(ns, key))
	if v == nil {
		return nil, false, nil
	}
	exp, val, err := decodeStateValue(v)
	if err != nil || !exp.IsZero() && !now.Before(exp) {
		return nil, false, err
	}
	return val, true, nil
}

// StatePut sets key in ns to value until expires (zero: never).
func (tx *Tx) StatePut(ns string, key, value []byte, expires time.Time) error {
	k := stateKey(ns, key)
	if _, err := tx.stateDrop(ns, k); err != nil {
		return err
	}
	v := make([]byte, 8, 8+len(value))
	if !expires.IsZero() {
		binary.BigEndian.PutUint64(v, uint64(expires.UnixNano()))
		if err := tx.bucket(bucketStateExp).Put(timeKey(expires, k), nil); err != nil {
			return err
		}
	}
	if err := tx.bucket(bucketState).Put(k, append(v, value...)); err != nil {
		return err
	}
	u := tx.StateUsage(ns)
	u.Keys++
	u.Bytes += int64(len(key) + len(value))
	return tx.putStateUsage(ns, u)
}

// StateDelete removes key from ns and says whether it was there.
func (tx *Tx) StateDelete(ns string, key []byte) (bool, error) {
	return tx.stateDrop(ns, stateKey(ns, key))
}

// stateDrop removes the entry k of ns and its expiry, and takes it out of
// the namespace's usage; it says whether there was one.
func (tx *Tx) stateDrop(ns string, k []byte) (bool, error) {
	b := tx.bucket(bucketState)
	old := b.Get(k)
	if old == nil {
		return false, nil
	}
	exp, val, err := decodeStateValue(old)
	if err != nil {
		return false, err
	}
	if !exp.IsZero() {
		if err := tx.bucket(bucketStateExp).Delete(timeKey(exp, k)); err != nil {
			return false, err
		}
	}
	if err := b.Delete(k); err != nil {
		return false, err
	}
	u := tx.StateUsage(ns)
	u.Keys--
	u.Bytes -= int64(len(k) - len(ns) - 1 + len(val))
	return true, tx.putStateUsage(ns, u)
}

// StateUsage is what ns holds now (expired keys not yet removed included).
func (tx *Tx) StateUsage(ns string) StateUsage {
	v := tx.bucket(bucketStateUsage).Get([]byte(ns))
	if len(v) != 16 {
		return StateUsage{}
	}
	return StateUsage{Keys: int64(binary.BigEndian.Uint64(v)), Bytes: int64(binary.BigEndian.Uint64(v[8:]))}
}

func (tx *Tx) putStateUsage(ns string, u StateUsage) error {
	b := tx.bucket(bucketStateUsage)
	if u.Keys <= 0 {
		return b.Delete([]byte(ns))
	}
	v := make([]byte, 16)
	binary.BigEndian.PutUint64(v, uint64(u.Keys))
	binary.BigEndian.PutUint64(v[8:], uint64(u.Bytes))
	return b.Put([]byte(ns), v)
}

// StateNamespaces lists every namespace that holds keys, with its usage.
func (tx *Tx) StateNamespaces() map[string]StateUsage {
	out := map[string]StateUsage{}
	tx.bucket(bucketStateUsage).ForEach(func(k, v []byte) error {
		if len(v) == 16 {
			out[string(k)] = StateUsage{Keys: int64(binary.BigEndian.Uint64(v)), Bytes: int64(binary.BigEndian.Uint64(v[8:]))}
		}
		return nil
	})
	return out
}

// StateScan lists up to limit unexpired keys of ns that start with prefix,
// in key order, after the key after (nil: from the first).
func (tx *Tx) StateScan(ns string, prefix, after []byte, now time.Time, limit int) ([]StateEntry, error) {
	c := tx.bucket(bucketState).Cursor()
	within := stateKey(ns, prefix)
	start := within
	if after != nil {
		start = stateKey(ns, after)
	}
	var out []StateEntry
	for k, v := c.Seek(start); k != nil && bytes.HasPrefix(k, within) && len(out) < limit; k, v = c.Next() {
		key := k[len(ns)+1:]
		if after != nil && bytes.Equal(key, after) {
			continue
		}
		exp, val, err := decodeStateValue(v)
		if err != nil {
			return nil, err
		}
		if !exp.IsZero() && !now.Before(exp) {
			continue
		}
		out = append(out, StateEntry{Key: bytes.Clone(key), Value: val, Expires: exp})
	}
	return out, nil
}

// DeleteStatePrefix removes up to limit keys of ns that start with prefix
// and says how many it removed.
func (tx *Tx) DeleteStatePrefix(ns string, prefix []byte, limit int) (int, error) {
	var keys [][]byte
	c := tx.bucket(bucketState).Cursor()
	p := stateKey(ns, prefix)
	for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p) && len(keys) < limit; k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if _, err := tx.stateDrop(ns, k); err != nil {
			return 0, err
		}
	}
	return len(keys), nil
}

// DeleteExpiredState forgets up to limit keys whose TTL ended.
func (tx *Tx) DeleteExpiredState(now time.Time, limit int) (int, error) {
	return tx.expire(bucketStateExp, now, limit, func(k []byte) error {
		i := bytes.IndexByte(k, 0)
		if i < 0 {
			return nil
		}
		_, err := tx.stateDrop(string(k[:i]), k)
		return err
	})
}
