package ucp

import (
	"sync"

	"github.com/ucxgo/ucx/internal/errs"
	"github.com/ucxgo/ucx/ucs"
)

// liveImports are a context's imported mappings that UCX still holds, by
// exporter context. UCX keeps one cache of imported regions per exporter
// and, importing a range that a cached region holds under another
// registration id (the exporter closed the mapping and registered the
// memory again), asserts that nothing uses the cached region any more
// (ucp_memh_import: refcount 1 on 1.16, 2 on 1.17 to 1.23, read in the
// sources), and aborts the process otherwise. Import refuses that case
// instead: an exporter's ranges overlapping under two registration ids,
// while the older import is live here.
type liveImports struct {
	mu         sync.Mutex // held across a whole Import: two at once could both pass the check
	byExporter map[uint64][]*liveImport
}

// liveImport is one imported mapping, as UCX's cache aligns it.
type liveImport struct {
	owner           *liveImports
	exporter, regID uint64
	start, end      uint64 // [start, end), aligned out to importAlign
}

// importAlign is UCX's alignment of cached imported regions
// (UCS_RCACHE_MIN_ALIGNMENT, 16 bytes).
const importAlign = 16

// conflict is a live import of d's exporter under another registration id
// that overlaps d's range, nil if none. Call with mu held.
func (l *liveImports) conflict(d *Descriptor) *liveImport {
	start, end := importRange(d)
	for _, i := range l.byExporter[d.contextUUID] {
		if i.regID != d.regID && i.start < end && start < i.end {
			return i
		}
	}
	return nil
}

// add records d as imported. Call with mu held.
func (l *liveImports) add(d *Descriptor) *liveImport {
	start, end := importRange(d)
	i := &liveImport{owner: l, exporter: d.contextUUID, regID: d.regID, start: start, end: end}
	if l.byExporter == nil {
		l.byExporter = map[uint64][]*liveImport{}
	}
	l.byExporter[d.contextUUID] = append(l.byExporter[d.contextUUID], i)
	return i
}

// unmapped forgets i once UCX has released its mapping; nil does nothing.
func (i *liveImport) unmapped() {
	if i == nil {
		return
	}
	l := i.owner
	l.mu.Lock()
	defer l.mu.Unlock()
	list := l.byExporter[i.exporter]
	for k, other := range list {
		if other == i {
			list[k] = list[len(list)-1]
			list[len(list)-1] = nil
			list = list[:len(list)-1]
			break
		}
	}
	if len(list) == 0 {
		delete(l.byExporter, i.exporter)
	} else {
		l.byExporter[i.exporter] = list
	}
}

func importRange(d *Descriptor) (start, end uint64) {
	start = d.address &^ (importAlign - 1)
	end = d.address + d.length
	if end < d.address { // wraps: everything from start
		return start, ^uint64(0)
	}
	if e := (end + importAlign - 1) &^ (importAlign - 1); e >= end {
		end = e
	}
	return start, end
}

func importConflictError(op string, d *Descriptor, i *liveImport) error {
	return errs.New(op, ucs.ErrBusy, "[%#x, %#x) of registration id %d overlaps [%#x, %#x) of the same exporter, imported here under registration id %d and not yet unmapped; UCX aborts the process on such an import (the exporter registered the memory again, or exported overlapping ranges): close the earlier import first (a closed mapping whose key was handed out stays mapped in the context's unmap quarantine, WithUnmapQuarantine)", d.address, d.address+d.length, d.regID, i.start, i.end, i.regID)
}
