package ucp

import (
	"fmt"
	"github.com/ucxgo/ucx/internal/errs"
	"strings"

	"github.com/ucxgo/ucx/cgo"
	"github.com/ucxgo/ucx/internal/handle"
	"github.com/ucxgo/ucx/ucs"
)

// Feature is a UCP feature (UCP_FEATURE_*).
type Feature uint64

// Features a context can request: UCP_FEATURE_*, the same bits in every
// supported release (TestFeatureBitsAreUCXs holds them to the C layer's).
const (
	FeatureTag    Feature = 0x1
	FeatureRMA    Feature = 0x2
	FeatureAMO32  Feature = 0x4
	FeatureAMO64  Feature = 0x8
	FeatureWakeup Feature = 0x10
	FeatureStream Feature = 0x20
	FeatureAM     Feature = 0x40
	// FeatureExportedMemh creates the per-peer import cache and forbids
	// active-message emulation of RMA: on a machine whose only transports
	// are self, tcp and shared memory, endpoints of such a context are
	// unreachable (ucs.ErrUnreachable). Request it only where export and
	// import are used.
	FeatureExportedMemh Feature = 0x80
)

// ContextOption configures NewContext.
type ContextOption func(*contextOptions)

type contextOptions struct {
	features   Feature
	config     []string
	name       string
	quarantine int
}

// WithFeatures sets the features (default RMA and AM). FeatureWakeup is
// always added: blocking waits need the worker's event fd.
func WithFeatures(f Feature) ContextOption {
	return func(o *contextOptions) { o.features = f }
}

// WithConfig sets a UCP configuration value (ucp_config_modify); name is
// the environment variable without "UCX_", e.g. WithConfig("TLS", "tcp"),
// and NewContext refuses a name with the prefix. UCX keeps a name no UCP
// option has for the transports and, if none of a new worker's transports
// has it either, only logs "invalid configuration" at NewWorker (at the
// default log level): the binding does not check those names.
func WithConfig(name, value string) ContextOption {
	return func(o *contextOptions) { o.config = append(o.config, name, value) }
}

// WithUnmapQuarantine sets how many bytes of closed mappings whose keys
// were handed out the context keeps mapped (see Mem.Close), oldest
// unmapped first; 0 or a negative count unmaps at once, which a peer's
// late operation can make crash. Default DefaultUnmapQuarantine.
func WithUnmapQuarantine(bytes int) ContextOption {
	return func(o *contextOptions) { o.quarantine = max(bytes, 0) }
}

// DefaultUnmapQuarantine is a context's unmap quarantine unless
// WithUnmapQuarantine says otherwise.
const DefaultUnmapQuarantine = 64 << 20

// WithName names the context in UCX's logs.
func WithName(name string) ContextOption {
	return func(o *contextOptions) { o.name = name }
}

// Context is a UCP context.
type Context struct {
	res      *handle.Resource[cgo.Context]
	c        cgo.Context
	retired  *retiredMaps // closed mappings whose keys were handed out
	imports  liveImports  // imported mappings UCX holds (see Import)
	features Feature
	config   []string
}

// NewContext creates a UCP context.
func NewContext(opts ...ContextOption) (*Context, error) {
	if err := ucs.CheckVersion(); err != nil {
		return nil, err
	}
	o := contextOptions{features: FeatureRMA | FeatureAM, name: "ucx-go", quarantine: DefaultUnmapQuarantine}
	for _, opt := range opts {
		opt(&o)
	}
	o.features |= FeatureWakeup
	for i := 0; i < len(o.config); i += 2 {
		if o.config[i] == "" {
			return nil, errs.New("ucp: create context", ucs.ErrInvalidParam, "empty config name")
		}
		if name := o.config[i]; strings.HasPrefix(strings.ToUpper(name), "UCX_") {
			return nil, errs.New("ucp: create context", ucs.ErrInvalidParam, "config name %q: give it without the UCX_ prefix (UCX would keep it as a transport option no transport has, and ignore it)", name)
		}
	}
	c, failed, st := cgo.Init(uint64(o.features), true, o.config, o.name)
	if st != 0 {
		e := &ucs.Error{Op: "ucp: create context", Err: ucs.Status(st)}
		if len(o.config) > 0 && failed < len(o.config)/2 {
			e.Reason = fmt.Sprintf("config %s=%q", o.config[2*failed], o.config[2*failed+1])
		}
		return nil, e
	}
	retired := &retiredMaps{c: c, budget: o.quarantine}
	ctx := &Context{c: c, features: o.features, config: o.config, retired: retired}
	ctx.res = handle.New(nil, func(c *cgo.Context) {
		retired.unmapAll()
		c.Cleanup()
	}, c)
	handle.Track(ctx, ctx.res)
	return ctx, nil
}

// Features are the features the context was created with.
func (c *Context) Features() Feature {
	if c == nil {
		return 0
	}
	return c.features
}

// Info is what ucp_context_query reports.
type Info struct {
	RequestSize uint64          // bytes UCP reserves per request for the binding
	ThreadMode  ThreadMode      // the context's: multi where workers are shared between threads
	MemoryTypes ucs.MemoryTypes // the memory types the context supports
	Name        string
}

// Info queries the context.
func (c *Context) Info() (Info, error) {
	if !c.enter() {
		return Info{}, closedError("ucp: query context")
	}
	defer c.res.Exit()
	i, st := c.c.Query()
	if err := errs.Status(ucs.Status(st), "ucp: query context"); err != nil {
		return Info{}, err
	}
	return Info{i.RequestSize, ThreadMode(i.ThreadMode), ucs.MemoryTypes(i.MemoryTypes), i.Name}, nil
}

// Close closes the context; its UCX object goes when its workers and
// mappings are closed too.
func (c *Context) Close() error {
	if c == nil || c.res == nil {
		return nil // nothing to close: cleanup code may close what it never got
	}
	c.res.Close()
	return nil
}

// enter is c.res.Enter for a Context that may be nil: a nil Context, like
// a zero one, is a closed one.
func (c *Context) enter() bool { return c != nil && c.res.Enter() }

func closedError(op string) error { return &ucs.Error{Op: op, Err: ucs.ErrClosed} }
