package storage

import (
	"fmt"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"

	"github.com/switchyard-router/switchyard/internal/fsperm"
)

// CompactReport is what CompactFile did.
type CompactReport struct {
	Path   string `json:"path"`
	Before int64  `json:"before_bytes"`
	After  int64  `json:"after_bytes"`
	// Kept: the compacted copy was no smaller (a small file: bbolt grows a
	// new file in steps of its mapping), so the original was left as it was.
	Kept bool `json:"kept,omitempty"`
	// ReserveRemoved: the disk had no room for the copy, so the reserve
	// beside the file went to make it (the router makes it again once
	// the disk has room).
	ReserveRemoved bool `json:"reserve_removed,omitempty"`
}

// CompactFile gives the free space of a data file that no router has open
// back to the filesystem (`router db compact`, which checks the file in a
// child process first: checkBeforeWriting). bbolt never shrinks a file:
// pages freed by cleanup are used again, but a file that once held a large
// backlog keeps its size. CompactFile copies every bucket into a new file
// beside it with every page packed full (bbolt.Compact), checks the copy
// as `router db check` does, and only then renames it over the original;
// on any failure the original is left as it was and the copy removed. It
// needs free space for the copy, about what the original holds in use.
func CompactFile(path string) (*CompactReport, error) {
	fi, err := statDataFile(path)
	if err != nil {
		return nil, err
	}
	if fi.Size() == 0 {
		// bbolt would start to make a new file of it, through a read-only
		// handle ("bad file descriptor").
		return nil, fmt.Errorf("%s is empty: not a data file, nothing to compact", path)
	}
	if err := notALink(path); err != nil {
		return nil, err
	}
	rep := &CompactReport{Path: path, Before: fi.Size()}
	// The original stays open (a shared lock) until the copy has replaced
	// it: a router that starts meanwhile finds the lock held and stops, or
	// takes it just after the rename and sees that the file was replaced
	// (openBolt).
	src, err := openBolt(path, readOnly())
	if err != nil {
		return nil, err
	}
	defer src.Close()
	tmp := compactCopyPath(path)
	err = compactCopy(src, path, tmp)
	if IsDiskFull(err) && removeReserve(path) {
		rep.ReserveRemoved = true
		if err = compactCopy(src, path, tmp); err != nil {
			err = fmt.Errorf("%w, after removing the reserve beside it to make room (the router makes it again once the disk has room)", err)
		}
	}
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(tmp); err == nil && fi.Size() >= rep.Before {
		os.Remove(tmp)
		rep.After, rep.Kept = rep.Before, true
		return rep, nil
	}
	if err := keepAccess(tmp, fi); err != nil {
		os.Remove(tmp)
		return nil, err
	}
	if now, err := os.Stat(path); err != nil || !os.SameFile(fi, now) {
		// Another compaction renamed its copy over the file meanwhile,
		// and a router may have it open now: this copy is of the old one.
		os.Remove(tmp)
		return nil, fmt.Errorf("%s was replaced while it was being compacted (another router db compact?): it is left as the other made it", path)
	}
	if err := replaceWith(path, tmp); err != nil {
		os.Remove(tmp)
		return nil, err
	}
	if fi, err := os.Stat(path); err == nil {
		rep.After = fi.Size()
	}
	return rep, nil
}

// compactCopy makes tmp a checked compacted copy of src, the data file at
// path (compactInto), or removes it.
func compactCopy(src *bolt.DB, path, tmp string) error {
	if err := createExcl(tmp); err != nil { // a copy left by a compaction that was stopped goes
		return err
	}
	err := compactInto(src, path, tmp)
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// compactInto copies src, the data file at path, into a new file at tmp
// and checks the copy.
func compactInto(src *bolt.DB, path, tmp string) error {
	dst, err := bolt.Open(tmp, 0o600, writable(0))
	if err != nil {
		return err
	}
	err = faultSafe(func() error { return bolt.Compact(dst, src, 64<<20) })
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("compact %s: %w", path, err)
	}
	rep, err := CheckFile(tmp)
	if err != nil {
		return fmt.Errorf("checking the compacted copy: %w", err)
	}
	if len(rep.Problems) > 0 {
		return fmt.Errorf("the compacted copy is not consistent (%s); %s is unchanged", rep.Problems[0], path)
	}
	return nil
}

// replaceWith renames tmp over path and makes the rename durable.
func replaceWith(path, tmp string) error {
	f, err := os.Open(tmp)
	if err != nil {
		return err
	}
	err = f.Sync()
	f.Close()
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// keepAccess gives the compacted copy at tmp the original's mode, owner
// and group (fi): bbolt makes it 0600 and the process's own, and a router
// run as another user (systemd's User=) could no longer open a file an
// operator compacted with sudo.
func keepAccess(tmp string, fi os.FileInfo) error {
	if err := os.Chmod(tmp, fi.Mode().Perm()); err != nil {
		return err
	}
	uid, ok := fsperm.Owner(fi)
	gid, _ := fsperm.Group(fi)
	if !ok || uid == os.Getuid() && gid == os.Getgid() {
		return nil
	}
	if err := os.Chown(tmp, uid, gid); err != nil {
		return fmt.Errorf("giving the compacted copy the owner of %s (uid %d, gid %d): %w; the file is unchanged", fi.Name(), uid, gid, err)
	}
	return nil
}

// compactCopyPath is where CompactFile makes the compacted copy of the
// data file at path, beside it.
func compactCopyPath(path string) string { return path + ".compacting" }
