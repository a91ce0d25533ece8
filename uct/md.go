package uct

import (
	"bytes"
	"fmt"
	"github.com/ucxgo/ucx/internal/errs"
	"strconv"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/handle"
	"github.com/ucxgo/ucx/ucs"
)

// Component is a UCT component (a family of transports: "ib", "posix",
// "tcp", ...) with the memory domains it found on this machine.
type Component struct {
	Name    string
	Flags   uint64
	MDNames []string // memory-domain resources; empty when no device was found
	c       cgo.Component
}

// Components lists UCT's components.
func Components() ([]Component, error) {
	if err := ucs.CheckVersion(); err != nil {
		return nil, err
	}
	list, st := cgo.Components()
	if err := errs.Status(ucs.Status(st), "uct: query components"); err != nil {
		return nil, err
	}
	out := make([]Component, 0, len(list))
	for _, c := range list {
		info, st := c.Query()
		if err := errs.Status(ucs.Status(st), "uct: query component"); err != nil {
			return nil, err
		}
		out = append(out, Component{Name: info.Name, Flags: info.Flags, MDNames: info.MDNames, c: c})
	}
	return out, nil
}

// MDOption configures OpenMD.
type MDOption func(*mdOptions)

type mdOptions struct{ config []string }

// WithConfig sets an MD configuration value before the MD is opened
// (uct_config_modify): name is the environment variable without "UCX_",
// e.g. WithConfig("POSIX_DIR", "/dev/shm") or WithConfig("IB_MLX5_DEVX", "n"),
// on every release (UCX 1.16 itself takes "DIR": the binding drops the
// component's prefix, its upper-cased name and "_", when the name as given
// is unknown; components whose configuration prefix differs from their name
// take their own names only).
func WithConfig(name, value string) MDOption {
	return func(o *mdOptions) { o.config = append(o.config, name, value) }
}

// OpenMD opens the memory domain named mdName (as listed in
// Component.MDNames) of whichever component has it.
func OpenMD(mdName string, opts ...MDOption) (*MD, error) {
	comps, err := Components()
	if err != nil {
		return nil, err
	}
	for _, c := range comps {
		for _, name := range c.MDNames {
			if name == mdName {
				return c.OpenMD(mdName, opts...)
			}
		}
	}
	return nil, errs.New(fmt.Sprintf("uct: open md %q", mdName), ucs.ErrNoDevice, "no component lists a memory domain of that name")
}

// OpenMD opens one of c's memory domains.
func (c Component) OpenMD(mdName string, opts ...MDOption) (*MD, error) {
	op := fmt.Sprintf("uct: open md %q", mdName)
	if err := ucs.CheckVersion(); err != nil {
		return nil, err
	}
	if c.c == (cgo.Component{}) {
		return nil, errs.New(op, ucs.ErrInvalidParam, "component %q is not one Components returned", c.Name)
	}
	var o mdOptions
	for _, opt := range opts {
		opt(&o)
	}
	md, failed, st := c.c.OpenMD(mdName, o.config)
	if st != 0 {
		e := &ucs.Error{Op: op, Err: ucs.Status(st)}
		if failed < len(o.config)/2 && ucs.Status(st) != ucs.OK && len(o.config) > 0 {
			e.Reason = fmt.Sprintf("config %s=%q", o.config[2*failed], o.config[2*failed+1])
		}
		return nil, e
	}
	attr, st := md.Query()
	if st != 0 {
		md.Close()
		return nil, errs.Status(ucs.Status(st), op+": query attributes")
	}
	m := &MD{name: mdName, component: c, md: md, attr: newAttr(attr), op: newOpNames(mdName)}
	m.res = handle.New(nil, func(md *cgo.MD) { md.Close() }, md)
	handle.Track(m, m.res)
	return m, nil
}

// MD is an open memory domain.
type MD struct {
	res       *handle.Resource[cgo.MD]
	name      string
	component Component
	md        cgo.MD
	attr      Attr
	op        *opNames
}

// opNames are the operation names errors carry, made once per MD so that
// the success path formats nothing.
type opNames struct{ register, alloc, attach, packRkey, export, unpack string }

func newOpNames(md string) *opNames {
	q := fmt.Sprintf("%q", md)
	return &opNames{
		register: "uct: register memory on md " + q,
		alloc:    "uct: allocate memory on md " + q,
		attach:   "uct: attach exported mkey on md " + q,
		packRkey: "uct: pack rkey on md " + q,
		export:   "uct: export mkey on md " + q,
		unpack:   "uct: unpack rkey on md " + q,
	}
}

// zeroMDOps name the operations of a zero MD, which are all refused.
var zeroMDOps = newOpNames("")

// ops are the MD's operation names.
func (m *MD) ops() *opNames {
	if m == nil || m.op == nil {
		return zeroMDOps
	}
	return m.op
}

// Name is the MD's resource name ("posix", "mlx5_0", ...).
func (m *MD) Name() string {
	if m == nil {
		return ""
	}
	return m.name
}

// Component is the component the MD belongs to.
func (m *MD) Component() Component {
	if m == nil {
		return Component{}
	}
	return m.component
}

// Attr returns the attributes queried with uct_md_query_v2 when the MD was
// opened (they do not change while it is open).
func (m *MD) Attr() Attr {
	if m == nil {
		return Attr{}
	}
	return m.attr
}

// Close closes the MD. Its UCX object is released once every registration,
// allocation and remote key made with it is closed too.
func (m *MD) Close() error {
	if m == nil || m.res == nil {
		return nil // nothing to close: cleanup code may close what it never got
	}
	m.res.Close()
	return nil
}

// HaveExportedMkey returns nil if the MD can export memory keys, else an
// error wrapping ucs.ErrUnsupported that says why.
func (m *MD) HaveExportedMkey() error {
	if m == nil || m.res == nil {
		return &ucs.Error{Op: m.ops().export, Err: ucs.ErrClosed, Reason: "a nil or zero MD: open one with OpenMD"}
	}
	return m.exportCapable(m.op.export)
}

func (m *MD) exportCapable(op string) error {
	if !m.attr.Flags.Has(FlagExportedMkey) {
		return errs.New(op, ucs.ErrUnsupported, "md lacks UCT_MD_FLAG_EXPORTED_MKEY")
	}
	if m.attr.ExportedMkeyPackedSize == 0 {
		return errs.New(op, ucs.ErrUnsupported, "md reports an exported mkey packed size of 0")
	}
	return nil
}

// enter starts an operation on the MD, or returns the closed error for op.
func (m *MD) enter(op string) error {
	if m == nil {
		return &ucs.Error{Op: op, Err: ucs.ErrClosed, Reason: "a nil MD"}
	}
	if !m.res.Enter() {
		return &ucs.Error{Op: op, Err: ucs.ErrClosed, Reason: "md " + strconv.Quote(m.name) + " is closed"}
	}
	return nil
}

// Attr are an MD's attributes (uct_md_attr_v2_t).
type Attr struct {
	ComponentName          string          `json:"component_name"`
	Flags                  MDFlags         `json:"flags"`
	MaxAlloc               uint64          `json:"max_alloc"` // largest allocation
	MaxReg                 uint64          `json:"max_reg"`   // largest registration
	RegMemTypes            ucs.MemoryTypes `json:"reg_mem_types"`
	RegNonblockMemTypes    ucs.MemoryTypes `json:"reg_nonblock_mem_types"`
	CacheMemTypes          ucs.MemoryTypes `json:"cache_mem_types"`
	GVAMemTypes            ucs.MemoryTypes `json:"gva_mem_types"`
	DetectMemTypes         ucs.MemoryTypes `json:"detect_mem_types"`
	AllocMemTypes          ucs.MemoryTypes `json:"alloc_mem_types"`
	AccessMemTypes         ucs.MemoryTypes `json:"access_mem_types"`
	DMABufMemTypes         ucs.MemoryTypes `json:"dmabuf_mem_types"`
	RegCostFixed           float64         `json:"reg_cost_fixed"`    // registration cost: seconds, fixed part
	RegCostPerByte         float64         `json:"reg_cost_per_byte"` // registration cost: seconds per byte
	RkeyPackedSize         int             `json:"rkey_packed_size"`
	ExportedMkeyPackedSize int             `json:"exported_mkey_packed_size"`
	RegAlignment           uint64          `json:"reg_alignment"`
	LocalCPUs              [16]uint64      `json:"-"`
	// GlobalID identifies the device across processes ("ib" + system image
	// GUID for IB MDs); nil when the MD reports an all-zero id.
	GlobalID []byte `json:"global_id"`
}

func newAttr(a cgo.MDAttr) Attr {
	gid := bytes.TrimRight(a.GlobalID[:], "\x00")
	if len(gid) == 0 {
		gid = nil
	}
	return Attr{
		ComponentName: a.ComponentName, Flags: MDFlags(a.Flags),
		MaxAlloc: a.MaxAlloc, MaxReg: a.MaxReg,
		RegMemTypes: ucs.MemoryTypes(a.RegMemTypes), RegNonblockMemTypes: ucs.MemoryTypes(a.RegNonblockMemTypes),
		CacheMemTypes: ucs.MemoryTypes(a.CacheMemTypes), GVAMemTypes: ucs.MemoryTypes(a.GVAMemTypes),
		DetectMemTypes: ucs.MemoryTypes(a.DetectMemTypes), AllocMemTypes: ucs.MemoryTypes(a.AllocMemTypes),
		AccessMemTypes: ucs.MemoryTypes(a.AccessMemTypes), DMABufMemTypes: ucs.MemoryTypes(a.DMABufMemTypes),
		RegCostFixed: a.RegCostFixed, RegCostPerByte: a.RegCostPerByte,
		RkeyPackedSize: int(a.RkeyPackedSize), ExportedMkeyPackedSize: int(a.ExportedMkeyPackedSize),
		RegAlignment: a.RegAlignment, LocalCPUs: a.LocalCPUs, GlobalID: gid,
	}
}
