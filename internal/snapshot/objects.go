package snapshot

import (
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// hotCacheSize bounds the trees and commits kept in memory: a 10,000-file
// workspace's trees take about 1 MiB per snapshot.
const hotCacheSize = 32 * cache.MiByte

// objects is the store's object database with its trees and commits kept
// in memory. go-git's own cache is consulted only after the loose object's
// file is opened (through a chroot that lstats every component), which
// made a turn boundary's ~200 tree lookups and a diff's tree reads cost
// tens of milliseconds (doc.go).
type objects struct {
	*filesystem.Storage
	hot cache.Object
}

func (o *objects) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if obj, ok := o.hot.Get(h); ok && (t == plumbing.AnyObject || obj.Type() == t) {
		return obj, nil
	}
	obj, err := o.Storage.EncodedObject(t, h)
	if err == nil && isHot(obj.Type()) {
		o.hot.Put(obj)
	}
	return obj, err
}

func (o *objects) HasEncodedObject(h plumbing.Hash) error {
	if _, ok := o.hot.Get(h); ok {
		return nil
	}
	return o.Storage.HasEncodedObject(h)
}

func (o *objects) SetEncodedObject(obj plumbing.EncodedObject) (plumbing.Hash, error) {
	h, err := o.Storage.SetEncodedObject(obj)
	if err == nil && isHot(obj.Type()) {
		o.hot.Put(obj)
	}
	return h, err
}

func isHot(t plumbing.ObjectType) bool {
	return t == plumbing.TreeObject || t == plumbing.CommitObject
}
