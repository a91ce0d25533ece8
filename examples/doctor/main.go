// Command doctor reports the UCX release ucx-go was built against, the one
// it loaded and the ABI layout it uses for it, every UCT component and
// memory domain, and whether each memory domain can export memory keys (and
// why not).
//
//	doctor [-json]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/ucxgo/ucx/ucs"
	"github.com/ucxgo/ucx/uct"
)

type report struct {
	Built   string   `json:"ucx_built"`
	Loaded  string   `json:"ucx_loaded"`
	Layout  string   `json:"ucx_abi_layout"` // uct_md_attr_v2_t layout: "1.16", "1.18" or "1.22"
	MDs     []mdLine `json:"memory_domains"`
	Exports int      `json:"export_capable"`
}

// mdLine is one memory domain of the report (uct.MDReport's verdict as a
// bool and its reason).
type mdLine struct {
	Component string    `json:"component"`
	MD        string    `json:"md,omitempty"`
	Attr      *uct.Attr `json:"attr,omitempty"`
	CanExport bool      `json:"can_export"`
	Reason    string    `json:"reason,omitempty"` // why it cannot export
}

func main() {
	asJSON := flag.Bool("json", false, "print the report as JSON")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s [-json]\n\nReports UCX versions and which memory domains can export memory keys.\n\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()

	r := report{Built: ucs.BuiltVersion().String(), Loaded: ucs.LoadedVersion().String()}
	if err := ucs.CheckVersion(); err != nil {
		fmt.Fprintln(os.Stderr, "doctor:", err)
		os.Exit(1)
	}
	r.Layout = ucs.ABILayout()
	mds, err := uct.Probe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "doctor:", err)
		os.Exit(1)
	}
	for _, m := range mds {
		err := m.HaveExportedMkey()
		r.MDs = append(r.MDs, mdLine{m.Component, m.MD, m.Attr, err == nil, uct.ExportReason(err)})
		if err == nil {
			r.Exports++
		}
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			fmt.Fprintln(os.Stderr, "doctor:", err)
			os.Exit(1)
		}
		return
	}
	printText(r)
}

func printText(r report) {
	fmt.Printf("UCX built against %s, loaded %s (uct_md_attr_v2_t layout of UCX %s and later)\n\n", r.Built, r.Loaded, r.Layout)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "COMPONENT\tMD\tFLAGS\tRKEY\tEXPORTED\tGLOBAL ID\tEXPORT")
	for _, m := range r.MDs {
		if m.Attr == nil {
			fmt.Fprintf(w, "%s\t-\t-\t-\t-\t-\tcannot export: %s\n", m.Component, m.Reason)
			continue
		}
		verdict := "CAN EXPORT"
		if !m.CanExport {
			verdict = "cannot export: " + m.Reason
		}
		gid := "-"
		if len(m.Attr.GlobalID) > 0 {
			gid = fmt.Sprintf("%x", m.Attr.GlobalID)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", m.Component, m.MD, orDash(m.Attr.Flags.String()),
			m.Attr.RkeyPackedSize, m.Attr.ExportedMkeyPackedSize, gid, verdict)
	}
	w.Flush()
	fmt.Println()
	if r.Exports == 0 {
		fmt.Println("No memory domain can export memory keys here: the exported-key (cross-GVMI) path needs an")
		fmt.Println("mlx5 DevX device (ConnectX-6 Dx or later, BlueField-2/3); rkey-based RMA still works.")
	} else {
		fmt.Printf("%d memory domain(s) can export memory keys.\n", r.Exports)
	}
}

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}
