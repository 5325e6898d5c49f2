package storage

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// boltFile makes a bbolt file at a temporary path, with a stored free
// list or without one (as the router writes: NoFreelistSync), holding
// 2,000 keys in bucket "b" (a branch over many leaves) and, with the free
// list, 500 of them deleted (free pages). It returns the path and the
// file's current meta.
func boltFile(t *testing.T, storedFreelist bool) (string, Meta) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "walk.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: !storedFreelist})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("b"))
		for i := 0; i < 2000 && err == nil; i++ {
			err = b.Put(fmt.Appendf(nil, "key-%05d", i), make([]byte, 100))
		}
		return err
	})
	if err == nil && storedFreelist {
		err = db.Update(func(tx *bolt.Tx) error {
			for i := 0; i < 500 && err == nil; i++ {
				err = tx.Bucket([]byte("b")).Delete(fmt.Appendf(nil, "key-%05d", i))
			}
			return err
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, ok := currentMeta(f)
	if !ok {
		t.Fatal("no valid meta")
	}
	if storedFreelist == (m.FreeList == noFreelist) {
		t.Fatalf("free list page %d, want stored %v", m.FreeList, storedFreelist)
	}
	return path, m
}

// editPage reads page id of the file at path, lets edit change it, and
// writes it back.
func editPage(t *testing.T, path string, m Meta, id uint64, edit func(p []byte)) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := make([]byte, m.PageSize)
	if _, err := f.ReadAt(p, int64(id)*int64(m.PageSize)); err != nil {
		t.Fatal(err)
	}
	edit(p)
	if _, err := f.WriteAt(p, int64(id)*int64(m.PageSize)); err != nil {
		t.Fatal(err)
	}
}

// bboltFinds is what bbolt's own check says of the file at path.
func bboltFinds(t *testing.T, path string) []string {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var found []string
	db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			found = append(found, err.Error())
		}
		return nil
	})
	return found
}

// The walk finds what bbolt's own check finds, which it takes the place of
// in CheckFile: damage of each kind below, made in a real bbolt file, is
// reported by both (and a sound file by neither). The kinds that a walk of
// each page alone cannot see: a leaf's keys outside the range its parent
// gives them, and, in a file with a stored free list, a page freed twice,
// freed and reached, or neither.
func TestTheWalkFindsWhatBboltsCheckFinds(t *testing.T) {
	for _, c := range []struct {
		name   string
		stored bool
		damage func(t *testing.T, path string, m Meta)
		want   string
	}{
		{"sound, no free list", false, func(*testing.T, string, Meta) {}, ""},
		{"sound, a free list", true, func(*testing.T, string, Meta) {}, ""},
		{"a leaf's first key below its parent's", false, func(t *testing.T, path string, m Meta) {
			id := laterLeaf(t, path, m)
			editPage(t, path, m, id, func(p []byte) {
				k, _, _, _ := element(id, p, 0, leafPage)
				k[len(k)-1]-- // still before the leaf's second key
			})
		}, "sorts before the key its parent gives it"},
		{"a page freed twice", true, func(t *testing.T, path string, m Meta) {
			editPage(t, path, m, m.FreeList, func(p []byte) {
				at := freeIDsAt(p)
				copy(p[at+8:at+16], p[at:at+8])
			})
		}, "is freed twice"},
		{"a page neither reached nor free", true, func(t *testing.T, path string, m Meta) {
			editPage(t, path, m, m.FreeList, func(p []byte) {
				if at := freeIDsAt(p); at == 24 {
					binary.LittleEndian.PutUint64(p[16:], binary.LittleEndian.Uint64(p[16:])-1)
				} else {
					binary.LittleEndian.PutUint16(p[10:], binary.LittleEndian.Uint16(p[10:])-1)
				}
			})
		}, "is neither reached nor free"},
		{"a reached page freed", true, func(t *testing.T, path string, m Meta) {
			editPage(t, path, m, m.FreeList, func(p []byte) {
				binary.LittleEndian.PutUint64(p[freeIDsAt(p):], m.Root)
			})
		}, "is both reached and free"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path, m := boltFile(t, c.stored)
			c.damage(t, path, m)
			err := walkPages(path, nil)
			byBbolt := bboltFinds(t, path)
			if c.want == "" {
				if err != nil || len(byBbolt) > 0 {
					t.Fatalf("a sound file: the walk says %v, bbolt %v", err, byBbolt)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("the walk says %v, want %q (bbolt's check: %v)", err, c.want, byBbolt)
			}
			if len(byBbolt) == 0 {
				t.Fatalf("bbolt's check finds nothing in a file the walk refuses (%v): the case is not the damage it names", err)
			}
			rep, cerr := CheckFile(path)
			if cerr != nil || len(rep.Problems) == 0 {
				t.Fatalf("CheckFile: %v, problems %v", cerr, rep.Problems)
			}
		})
	}
}

// laterLeaf is a leaf page of bucket "b" that is not its first: a page
// whose first key its parent's branch element gives.
func laterLeaf(t *testing.T, path string, m Meta) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(2); id < m.HighWater; id++ {
		p := b[id*uint64(m.PageSize) : (id+1)*uint64(m.PageSize)]
		if binary.LittleEndian.Uint16(p[8:]) != leafPage || binary.LittleEndian.Uint16(p[10:]) < 2 {
			continue
		}
		if k, _, _, err := element(id, p, 0, leafPage); err == nil && strings.HasPrefix(string(k), "key-") && string(k) != "key-00000" {
			return id
		}
	}
	t.Fatal("no leaf of b but its first")
	return 0
}

// freeIDsAt is where a free list page's ids begin.
func freeIDsAt(p []byte) int {
	if binary.LittleEndian.Uint16(p[10:]) == 0xFFFF {
		return 24
	}
	return 16
}
