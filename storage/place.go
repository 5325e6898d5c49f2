package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// PlaceNew puts the finished file tmp at path, which it never replaces: a
// hard link, then tmp removed. Where the filesystem has no hard links
// (vfat, exFAT, many network mounts), a rename once path is seen free. On
// failure tmp stays, and the error names it.
func PlaceNew(tmp, path string) error {
	err := os.Link(tmp, path)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		if _, serr := os.Lstat(path); errors.Is(serr, fs.ErrNotExist) {
			err = os.Rename(tmp, path)
		}
	}
	if err != nil {
		return fmt.Errorf("%w (the copy is kept at %s)", err, tmp)
	}
	os.Remove(tmp) // linked: path is the copy now
	return SyncDir(filepath.Dir(path))
}

// SyncDir fsyncs a folder, so that a file created, linked or renamed in it
// stays after a power cut.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// createFile makes a new data file at path whole: bbolt writes its first
// pages to path.new and fsyncs them, and only then is the file named path
// (PlaceNew). So no router ever leaves an empty data file, even when it is
// stopped while it makes one, and an empty file at path is refused as a
// truncated one (checkSize), not taken for a new one: the start after a
// file was cut to nothing would otherwise begin again empty, and every
// event it held would be lost without a word. A file another router made
// at path meanwhile is left to it.
func createFile(path string) error {
	tmp := path + ".new"
	err := createExcl(tmp)
	var bdb *bolt.DB
	if err == nil {
		bdb, err = bolt.Open(tmp, 0o600, writable(0))
	}
	if err == nil {
		err = bdb.Close()
	}
	if err == nil {
		err = PlaceNew(tmp, path)
	}
	if errors.Is(err, fs.ErrExist) {
		os.Remove(tmp)
		return nil // another router's: the lock decides
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("create the data file: %w", err)
	}
	return nil
}

// createExcl makes an empty file at path, private, that no one else made:
// a file left there by a run that was stopped is removed first, and one
// the router may not remove (another user's, in a sticky folder such as
// /tmp) or a link made there meanwhile is an error, never opened: bbolt
// would otherwise write into whatever is at path. One another process
// holds locked (a second compaction of the same file, still copying) is
// an error too: removed, both compactions failed after their whole copy.
func createExcl(path string) error {
	if heldByAnother(path) {
		return fmt.Errorf("%s is being written by another process (router db compact of the same file, or a router making it?): wait for it to end", path)
	}
	os.Remove(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s is in the way and the router may not remove it (another user's?): remove it", path)
	}
	if err != nil {
		return err
	}
	return f.Close()
}
