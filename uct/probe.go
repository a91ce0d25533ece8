package uct

import (
	"errors"
	"fmt"
	"github.com/ucxgo/ucx/internal/errs"
	"strings"

	"github.com/ucxgo/ucx/ucs"
)

// MDReport is what Probe found about one memory domain, or about a
// component that found no memory domain (MD is then empty).
type MDReport struct {
	Component string
	MD        string
	Attr      *Attr
	exportErr error
}

// HaveExportedMkey returns nil if the memory domain can export memory
// keys, else an error wrapping ucs.ErrUnsupported that says why (the same
// check as MD.HaveExportedMkey, or why the MD could not be opened).
func (r MDReport) HaveExportedMkey() error {
	if r.exportErr == nil && r.Attr == nil {
		return errNoReport // a zero report, not one of Probe's
	}
	return r.exportErr
}

var errNoReport = errs.New("uct: export check", ucs.ErrUnsupported, "a zero MDReport: Probe makes them")

// ExportReason is why err says a memory domain cannot export: its reason
// alone, for a report line.
func ExportReason(err error) string {
	if err == nil {
		return ""
	}
	var ue *ucs.Error
	if errors.As(err, &ue) && ue.Reason != "" {
		return ue.Reason
	}
	return err.Error()
}

// Probe opens every memory domain of every component and reports whether
// it can export memory keys, with the reason when it cannot. A component
// without memory domains is reported once, with the reason "no device".
func Probe() ([]MDReport, error) {
	const op = "uct: probe memory domains"
	comps, err := Components()
	if err != nil {
		return nil, err
	}
	var out []MDReport
	for _, c := range comps {
		if len(c.MDNames) == 0 {
			out = append(out, MDReport{Component: c.Name, exportErr: errs.New(op, ucs.ErrUnsupported, "no device: the component found no memory domain on this machine")})
			continue
		}
		for _, name := range c.MDNames {
			r := MDReport{Component: c.Name, MD: name}
			md, err := c.OpenMD(name)
			if err != nil {
				r.exportErr = errs.New(op, ucs.ErrUnsupported, "cannot open: %v", err)
				out = append(out, r)
				continue
			}
			attr := md.Attr()
			r.Attr = &attr
			r.exportErr = md.HaveExportedMkey()
			md.Close()
			out = append(out, r)
		}
	}
	return out, nil
}

// HaveExportedMkey returns nil if a memory domain of this machine can
// export memory keys (UCT_MD_FLAG_EXPORTED_MKEY: mlx5 DevX hardware), else
// an error wrapping ucs.ErrUnsupported that lists why each cannot. Probe
// says which domains can.
func HaveExportedMkey() error {
	reports, err := Probe()
	if err != nil {
		return err
	}
	var why []string
	for _, r := range reports {
		if r.exportErr == nil {
			return nil
		}
		name := r.Component
		if r.MD != "" {
			name = r.Component + "/" + r.MD
		}
		why = append(why, fmt.Sprintf("%s: %s", name, ExportReason(r.exportErr)))
	}
	return errs.New("uct: find an export-capable memory domain", ucs.ErrUnsupported, "none of %d can export (%s)", len(reports), strings.Join(why, "; "))
}
