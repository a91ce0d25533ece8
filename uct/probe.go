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
	Component string `json:"component"`
	MD        string `json:"md,omitempty"`
	Attr      *Attr  `json:"attr,omitempty"`
	CanExport bool   `json:"can_export"`
	Reason    string `json:"reason,omitempty"` // why it cannot export
}

// Probe opens every memory domain of every component and reports whether
// it can export memory keys, with the reason when it cannot. A component
// without memory domains is reported once, with the reason "no device".
func Probe() ([]MDReport, error) {
	comps, err := Components()
	if err != nil {
		return nil, err
	}
	var out []MDReport
	for _, c := range comps {
		if len(c.MDNames) == 0 {
			out = append(out, MDReport{Component: c.Name, Reason: "no device: the component found no memory domain on this machine"})
			continue
		}
		for _, name := range c.MDNames {
			r := MDReport{Component: c.Name, MD: name}
			md, err := c.OpenMD(name)
			if err != nil {
				r.Reason = "cannot open: " + err.Error()
				out = append(out, r)
				continue
			}
			attr := md.Attr()
			r.Attr = &attr
			if err := md.CanExport(); err != nil {
				var ue *ucs.Error
				if errors.As(err, &ue) && ue.Reason != "" {
					r.Reason = ue.Reason
				} else {
					r.Reason = err.Error()
				}
			} else {
				r.CanExport = true
			}
			md.Close()
			out = append(out, r)
		}
	}
	return out, nil
}

// ExportCapable returns the first memory domain Probe finds able to export,
// or an error wrapping ucs.ErrUnsupported that lists why none can.
func ExportCapable() (MDReport, error) {
	reports, err := Probe()
	if err != nil {
		return MDReport{}, err
	}
	var why []string
	for _, r := range reports {
		if r.CanExport {
			return r, nil
		}
		name := r.Component
		if r.MD != "" {
			name = r.Component + "/" + r.MD
		}
		why = append(why, fmt.Sprintf("%s: %s", name, r.Reason))
	}
	return MDReport{}, errs.New("uct: find an export-capable memory domain", ucs.ErrUnsupported, "none of %d can export (%s)", len(reports), strings.Join(why, "; "))
}
