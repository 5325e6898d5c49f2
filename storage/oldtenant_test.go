package storage

import (
	"context"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// A tenant's outbound event as a router before 48380fc stored it (schema
// 1, a readable schema): under its bare id, not "<tenant>/<id>"
// (docs/decisions/tenant-scope.md: "keeps those records under their bare
// ids: they are still published"). The file is good; CheckFile calls it
// damaged, and Open after an unclean stop (CheckUnclean = CheckFile's
// verdict, as cmd/router's checkAfterUncleanStop does) refused to start
// (a review of session 43's recordProblem).
func TestAPreTenantScopeRecordIsNotDamage(t *testing.T) {
	path := closedFile(t, 3, 0)
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		r := diskEvent(time.Unix(1000, 0))
		r.Tenant = "acme"
		r.State = StatePending
		r.NextAttemptAt = r.CreatedAt
		r.QueueSeq = 99
		v, err := encodeRecord(r)
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketEvents).Put([]byte(r.Event.ID), v); err != nil { // the old key: the bare id
			return err
		}
		q := tx.Bucket(bucketQueue).Bucket([]byte(r.Event.Type))
		k := append(u64(uint64(r.NextAttemptAt.UnixNano())), u64(99)...)
		if err := q.Put(k, []byte(r.Event.ID)); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keyRunning, []byte("x")) // the last run stopped uncleanly
	})
	rep, err := CheckFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) > 0 {
		t.Errorf("CheckFile calls a pre-tenant-scope record damage: %q", rep.Problems)
	}
	db, err := Open(path, Options{CheckUnclean: func(p string) error {
		rep, err := CheckFile(p)
		if err == nil && len(rep.Problems) > 0 {
			return errString(strings.Join(rep.Problems, "; "))
		}
		return err
	}})
	if err != nil {
		t.Fatalf("Open after an unclean stop refuses the file: %v", err)
	}
	db.Close(context.Background())
}

// errString is an error of its text.
type errString string

func (e errString) Error() string { return string(e) }
