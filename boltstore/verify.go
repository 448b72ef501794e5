package boltstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
)

// DamagedError says that the store file is not a whole bbolt file: cut
// short, overwritten, or not a database at all. The store refuses such a
// file before bbolt touches it, because bbolt does not fail on one: it
// faults reading pages past the end of the file, asserts on a page that
// names another, and panics on a goroutine of its own for any problem its
// free-page scan finds at open, none of which a caller can recover from.
type DamagedError struct {
	Path    string
	Problem string

	serving bool   // found while the store served (by guard, or a read), not at open
	trace   string // its stack, for the log
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("the database file %s is damaged: %s", e.Path, e.Problem)
}

// The bbolt file format (version 2), as its internal/common package lays it
// out. Every field is in the machine's byte order: bbolt writes its pages
// by casting structs, so a file is only ever read on the kind of machine
// that wrote it.
const (
	pageHeaderSize   = 16 // id uint64, flags uint16, count uint16, overflow uint32
	pageElementSize  = 16 // branch: pos, ksize uint32, pgid uint64; leaf: flags, pos, ksize, vsize uint32
	bucketHeaderSize = 16 // root pgid uint64, sequence uint64
	metaSize         = 64 // magic, version, page size, flags uint32; root bucket; freelist, pgid, txid, checksum uint64
	metaChecksummed  = 56 // the checksum covers the meta up to itself

	metaMagic   = 0xED0CDAED
	metaVersion = 2
	noFreelist  = ^uint64(0)

	branchPage   = 0x01
	leafPage     = 0x02
	freelistPage = 0x10
	bucketLeaf   = 0x01

	// bbolt looks for the second meta page at 1 KiB to 16 MiB; a tree
	// deeper than maxDepth (buckets nested in buckets included) is no tree
	// bbolt writes, whose pages hold at least two keys each.
	minPageSize = 1 << 10
	maxPageSize = 1 << 24
	maxDepth    = 256
)

var ne = binary.NativeEndian

// fileMeta is one meta page.
type fileMeta struct {
	pageSize uint32
	root     uint64 // the root bucket's page
	freelist uint64 // noFreelist when the free pages are not written
	hwm      uint64 // pages in use: every page id is below it
	txid     uint64
	err      error // why the page is not valid, if it is not
}

func parseMeta(page []byte) fileMeta {
	if len(page) < pageHeaderSize+metaSize {
		return fileMeta{err: errors.New("cut short")}
	}
	m := page[pageHeaderSize : pageHeaderSize+metaSize]
	fm := fileMeta{
		pageSize: ne.Uint32(m[8:]),
		root:     ne.Uint64(m[16:]),
		freelist: ne.Uint64(m[32:]),
		hwm:      ne.Uint64(m[40:]),
		txid:     ne.Uint64(m[48:]),
	}
	h := fnv.New64a()
	h.Write(m[:metaChecksummed])
	switch {
	case ne.Uint32(m[0:]) != metaMagic:
		fm.err = errors.New("no bbolt marker")
	case ne.Uint32(m[4:]) != metaVersion:
		fm.err = fmt.Errorf("format version %d, not %d", ne.Uint32(m[4:]), metaVersion)
	case ne.Uint64(m[56:]) != h.Sum64():
		fm.err = errors.New("checksum mismatch")
	}
	return fm
}

// verifyFile checks the bbolt file f of size bytes before bbolt maps it:
// the meta page bbolt will use, that the file holds every page it counts,
// its free-page list, and the tree of pages from its root, with the checks
// bbolt's free-page scan makes at open (each page named by its parent, of
// the right kind, referenced once, its keys in order) plus the bounds it
// takes for granted (every element, key and value within its page, every
// page id within the file). It reads each page once, with plain reads: a
// page past the end of the file is an error here, not a fault in a
// mapping.
//
// With whole set, or when the file has no free-page list (bbolt then scans
// every page at open, on a goroutine of its own where a panic cannot be
// recovered), the walk goes through every page in use, and what passes
// cannot make bbolt fault or panic on its structure. Otherwise it stops at
// the top-level buckets' own trees (the WAL and the list of sandboxes):
// what bbolt and the WAL replay read at open, a few pages per sandbox at
// most, whatever the logs hold; the rest is read under guard as it is
// used (see doc.go, The file under the store). It reports whether the
// walk was whole.
func verifyFile(f io.ReaderAt, size int64, path string, whole bool) (bool, error) {
	v, err := walkFile(f, size, path, whole)
	return v != nil && v.whole, err
}

// walkFile is verifyFile, returning the walk: its seen has the pages in
// use that it walked (not the free ones).
func walkFile(f io.ReaderAt, size int64, path string, whole bool) (*verifier, error) {
	damaged := func(format string, args ...any) error {
		return &DamagedError{Path: path, Problem: fmt.Sprintf(format, args...)}
	}
	head := make([]byte, 4<<10)
	n, _ := f.ReadAt(head, 0)
	if n < pageHeaderSize+metaSize {
		return nil, damaged("it is %d bytes, too short to be a database", size)
	}
	// The page size as bbolt finds it: from the first meta page, else from
	// the second, looked for where each possible page size would put it.
	m0 := parseMeta(head[:n])
	pageSize := m0.pageSize
	if m0.err != nil {
		pageSize = 0
		for i := 0; i <= 14; i++ {
			pos := int64(minPageSize) << i
			if pos >= size-minPageSize {
				break
			}
			buf := make([]byte, pageHeaderSize+metaSize)
			if k, _ := f.ReadAt(buf, pos); k == len(buf) {
				if m := parseMeta(buf); m.err == nil {
					pageSize = m.pageSize
					break
				}
			}
		}
		if pageSize == 0 {
			return nil, damaged("neither of its meta pages is valid (the first: %v): it is not a sparkles database, or its start was overwritten", m0.err)
		}
	}
	if pageSize < minPageSize || pageSize > maxPageSize || pageSize&(pageSize-1) != 0 {
		return nil, damaged("its meta page gives a page size of %d bytes", pageSize)
	}
	ps := int64(pageSize)
	if size < 2*ps {
		return nil, damaged("it is %d bytes, less than its two meta pages of %d", size, ps)
	}
	buf := make([]byte, pageHeaderSize+metaSize)
	if _, err := f.ReadAt(buf, 0); err != nil {
		return nil, damaged("reading its first meta page: %v", err)
	}
	m0 = parseMeta(buf)
	if _, err := f.ReadAt(buf, ps); err != nil {
		return nil, damaged("reading its second meta page: %v", err)
	}
	m1 := parseMeta(buf)
	// bbolt uses the meta of the later transaction, or the other when that
	// one is not valid (a commit cut short).
	m := m0
	if m1.txid > m0.txid {
		m, m1 = m1, m0
	}
	if m.err != nil {
		m = m1
	}
	if m.err != nil {
		return nil, damaged("neither of its meta pages is valid (%v)", m.err)
	}
	if pages := uint64(size / ps); m.hwm > pages {
		return nil, damaged("it is cut short: %d bytes, where its last commit counts %d pages of %d bytes (%d bytes)", size, m.hwm, ps, m.hwm*uint64(ps))
	}
	if m.root < 2 || m.root >= m.hwm {
		return nil, damaged("its root page %d is outside its %d pages", m.root, m.hwm)
	}
	v := &verifier{f: f, pageSize: ps, hwm: m.hwm, seen: make([]uint64, (m.hwm+63)/64), damaged: damaged,
		whole: whole || m.freelist == noFreelist}
	var free []uint64
	if m.freelist != noFreelist {
		var err error
		if free, err = v.freelist(m.freelist); err != nil {
			return nil, err
		}
	}
	if _, err := v.tree(m.root, 0, 0, nil, nil); err != nil {
		return nil, err
	}
	for _, id := range free {
		if v.seen[id/64]&(1<<(id%64)) != 0 {
			return nil, damaged("page %d is both free and in use", id)
		}
	}
	return v, nil
}

// verifier walks the pages of one file. seen has a bit per page id below
// hwm, set once the page is referenced.
type verifier struct {
	whole    bool // into every bucket, else only the top-level buckets' trees
	f        io.ReaderAt
	pageSize int64
	hwm      uint64
	seen     []uint64
	bufs     [][]byte // a read buffer per depth, reused from page to page
	damaged  func(format string, args ...any) error
}

// maxKeySize is bbolt's bound on a key; reading a longer one would only
// follow a damaged length.
const maxKeySize = 32768

// mark notes page id as referenced and reports whether it was already.
func (v *verifier) mark(id uint64) bool {
	w, bit := id/64, uint64(1)<<(id%64)
	was := v.seen[w]&bit != 0
	v.seen[w] |= bit
	return was
}

// pageView is one page with its overflow pages. buf holds its first page
// and its whole element table; the rest (keys far into a large page) is
// read on demand, so memory stays bounded by a page and a table whatever
// sizes a damaged page claims.
type pageView struct {
	v     *verifier
	id    uint64
	flags uint16
	count int
	span  uint64 // bytes of the page and its overflow pages
	buf   []byte
}

// page reads page id into the buffer of depth and checks its header: its
// own id, inside the file, referenced once, its element table inside it.
func (v *verifier) page(id uint64, depth int) (*pageView, error) {
	if id < 2 || id >= v.hwm {
		return nil, v.damaged("a page refers to page %d, outside its %d pages", id, v.hwm)
	}
	for len(v.bufs) <= depth {
		v.bufs = append(v.bufs, make([]byte, v.pageSize))
	}
	buf := v.bufs[depth][:v.pageSize]
	if _, err := v.f.ReadAt(buf, int64(id)*v.pageSize); err != nil {
		return nil, v.damaged("reading page %d: %v", id, err)
	}
	if got := ne.Uint64(buf); got != id {
		return nil, v.damaged("page %d holds page %d's header: the file was overwritten or pages were lost", id, got)
	}
	overflow := uint64(ne.Uint32(buf[12:]))
	if overflow >= v.hwm-id {
		return nil, v.damaged("page %d runs over %d more pages, past the last", id, overflow)
	}
	for i := id; i <= id+overflow; i++ {
		if v.mark(i) {
			return nil, v.damaged("page %d is referenced twice", i)
		}
	}
	p := &pageView{v: v, id: id, flags: ne.Uint16(buf[8:]), count: int(ne.Uint16(buf[10:])), span: (overflow + 1) * uint64(v.pageSize), buf: buf}
	if p.flags == branchPage || p.flags == leafPage {
		table := uint64(pageHeaderSize + p.count*pageElementSize)
		if table > p.span {
			return nil, v.damaged("page %d counts %d elements, more than it holds", id, p.count)
		}
		if table > uint64(len(buf)) {
			if uint64(cap(v.bufs[depth])) < table {
				v.bufs[depth] = make([]byte, table)
			}
			p.buf = v.bufs[depth][:table]
			if _, err := v.f.ReadAt(p.buf, int64(id)*v.pageSize); err != nil {
				return nil, v.damaged("reading page %d: %v", id, err)
			}
		}
	}
	return p, nil
}

// bytes returns n bytes at off in the page, which must lie inside it.
func (p *pageView) bytes(off, n uint64) ([]byte, error) {
	if off > p.span || n > p.span-off {
		return nil, errors.New("outside the page")
	}
	if off+n <= uint64(len(p.buf)) {
		return p.buf[off : off+n], nil
	}
	b := make([]byte, n)
	if _, err := p.v.f.ReadAt(b, int64(p.id)*p.v.pageSize+int64(off)); err != nil {
		return nil, err
	}
	return b, nil
}

// key returns the key of the element at off (an element's positions are
// from the element itself).
func (p *pageView) key(i int, off, pos, ksize uint64) ([]byte, error) {
	if ksize > maxKeySize {
		return nil, p.v.damaged("page %d: key %d claims %d bytes", p.id, i, ksize)
	}
	k, err := p.bytes(off+pos, ksize)
	if err != nil {
		return nil, p.v.damaged("page %d: key %d: %v", p.id, i, err)
	}
	return k, nil
}

// freelist checks the free-page list at id and returns its page ids.
func (v *verifier) freelist(id uint64) ([]uint64, error) {
	p, err := v.page(id, 0)
	if err != nil {
		return nil, err
	}
	if p.flags != freelistPage {
		return nil, v.damaged("its free-page list at page %d is a page of kind %#x", id, p.flags)
	}
	// A count of 0xFFFF means the count is the list's first element.
	from, count := uint64(0), uint64(p.count)
	if count == 0xFFFF {
		from, count = 1, ne.Uint64(p.buf[pageHeaderSize:])
	}
	if count > (p.span-pageHeaderSize)/8-from {
		return nil, v.damaged("its free-page list at page %d counts %d pages, more than it holds", id, count)
	}
	raw, err := p.bytes(pageHeaderSize+from*8, count*8)
	if err != nil {
		return nil, v.damaged("its free-page list at page %d: %v", id, err)
	}
	ids := make([]uint64, count)
	for i := range ids {
		ids[i] = ne.Uint64(raw[i*8:])
		if ids[i] < 2 || ids[i] >= v.hwm {
			return nil, v.damaged("its free-page list names page %d, outside its %d pages", ids[i], v.hwm)
		}
	}
	// bbolt writes the list sorted; one it would read with a page twice
	// would hand that page out twice.
	slices.Sort(ids)
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			return nil, v.damaged("its free-page list names page %d twice", ids[i])
		}
	}
	return ids, nil
}

// tree checks the b-tree page id (of a bucket nested nesting deep: 0 for
// the root) and what it holds, as bbolt's check
// orders keys: every key within [lo, hi) (nil for no bound), strictly
// increasing, each branch key at most the first of its child's and above
// the greatest of the child before. It returns the greatest key of the
// subtree.
func (v *verifier) tree(id uint64, depth, nesting int, lo, hi []byte) ([]byte, error) {
	if depth > maxDepth {
		return nil, v.damaged("its pages nest deeper than %d", maxDepth)
	}
	p, err := v.page(id, depth)
	if err != nil {
		return nil, err
	}
	switch p.flags {
	case branchPage:
		if p.count == 0 {
			return nil, v.damaged("branch page %d is empty", id)
		}
		keys := make([][]byte, p.count)
		children := make([]uint64, p.count)
		for i := range p.count {
			off := uint64(pageHeaderSize + i*pageElementSize)
			e := p.buf[off : off+pageElementSize]
			k, err := p.key(i, off, uint64(ne.Uint32(e)), uint64(ne.Uint32(e[4:])))
			if err != nil {
				return nil, err
			}
			// Copied: the walks of the children below reuse the buffers
			// of the depths under this one, and this page's buffer is its
			// next sibling's.
			keys[i], children[i] = bytes.Clone(k), ne.Uint64(e[8:])
		}
		low := lo
		var top []byte
		for i, key := range keys {
			if err := v.order(id, i, key, low, hi); err != nil {
				return nil, err
			}
			next := hi
			if i+1 < p.count {
				next = keys[i+1]
			}
			if top, err = v.tree(children[i], depth+1, nesting, key, next); err != nil {
				return nil, err
			}
			low = top
		}
		return top, nil
	case leafPage:
		low := lo
		var buckets [][]byte
		for i := range p.count {
			off := uint64(pageHeaderSize + i*pageElementSize)
			e := p.buf[off : off+pageElementSize]
			flags, pos, ksize, vsize := ne.Uint32(e), uint64(ne.Uint32(e[4:])), uint64(ne.Uint32(e[8:])), uint64(ne.Uint32(e[12:]))
			k, err := p.key(i, off, pos, ksize)
			if err != nil {
				return nil, err
			}
			if off+pos+ksize+vsize > p.span {
				return nil, v.damaged("page %d: the value of key %d lies outside the page", id, i)
			}
			if err := v.order(id, i, k, low, hi); err != nil {
				return nil, err
			}
			low = bytes.Clone(k)
			if flags&bucketLeaf == 0 {
				continue
			}
			// A bucket's value is its header, then for an inline bucket a
			// page of its own, which bbolt keeps under a quarter page.
			if vsize < bucketHeaderSize || vsize > uint64(v.pageSize) {
				return nil, v.damaged("page %d: the bucket at key %d has a value of %d bytes", id, i, vsize)
			}
			b, err := p.bytes(off+pos+ksize, vsize)
			if err != nil {
				return nil, v.damaged("page %d: the bucket at key %d: %v", id, i, err)
			}
			buckets = append(buckets, bytes.Clone(b))
		}
		// Nested buckets last: their walks reuse the buffers from the
		// depth below this one. A walk that is not whole stops at the
		// buckets of the top-level buckets (nesting 2).
		if !v.whole && nesting >= 1 {
			buckets = nil
		}
		for _, b := range buckets {
			if err := v.bucket(id, b, depth+1, nesting+1); err != nil {
				return nil, err
			}
		}
		if p.count == 0 {
			return nil, nil // as bbolt's check has it: an empty leaf bounds nothing
		}
		return low, nil
	}
	return nil, v.damaged("page %d is of kind %#x where a branch or a leaf belongs", id, p.flags)
}

// bucket checks a nested bucket from its value in the leaf page parent:
// its own tree, or the page inlined in the value.
func (v *verifier) bucket(parent uint64, value []byte, depth, nesting int) error {
	if root := ne.Uint64(value); root != 0 {
		_, err := v.tree(root, depth, nesting, nil, nil)
		return err
	}
	// An inline bucket: a leaf page inside the value, which bbolt writes
	// only for a bucket without buckets.
	p := value[bucketHeaderSize:]
	if len(p) < pageHeaderSize {
		return v.damaged("page %d: an inline bucket is cut short", parent)
	}
	flags, count := ne.Uint16(p[8:]), int(ne.Uint16(p[10:]))
	if flags != leafPage || pageHeaderSize+count*pageElementSize > len(p) {
		return v.damaged("page %d: an inline bucket is no leaf page (kind %#x, %d elements in %d bytes)", parent, flags, count, len(p))
	}
	var low []byte
	for i := range count {
		off := uint64(pageHeaderSize + i*pageElementSize)
		flags, pos, ksize, vsize := ne.Uint32(p[off:]), uint64(ne.Uint32(p[off+4:])), uint64(ne.Uint32(p[off+8:])), uint64(ne.Uint32(p[off+12:]))
		if off+pos+ksize+vsize > uint64(len(p)) {
			return v.damaged("page %d: an inline bucket's element %d lies outside it", parent, i)
		}
		if flags&bucketLeaf != 0 {
			return v.damaged("page %d: an inline bucket holds a bucket", parent)
		}
		key := p[off+pos : off+pos+ksize]
		if err := v.order(parent, i, key, low, nil); err != nil {
			return err
		}
		low = key
	}
	return nil
}

// order checks key i of page id against the key before it (or the lower
// bound, for the first) and the upper bound, as bbolt's check does.
func (v *verifier) order(id uint64, i int, key, prev, hi []byte) error {
	if prev != nil {
		c := bytes.Compare(prev, key)
		if c > 0 || c == 0 && i > 0 {
			return v.damaged("page %d: key %d is out of order", id, i)
		}
	}
	if hi != nil && bytes.Compare(key, hi) >= 0 {
		return v.damaged("page %d: key %d is beyond its parent's next key", id, i)
	}
	return nil
}
