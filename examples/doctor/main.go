// Command doctor reports the UCX release ucx-go was built against, the one
// it loaded and the ABI layout it uses for it, every UCT component and
// memory domain, whether each memory domain can export memory keys (and
// why not), and what package share would do here: the mode an exporter
// runs in and why, the address and network devices its data paths bind
// for a peer, and what a peer reaching them can reach.
//
//	doctor [-json] [-peer ADDR] [-mode auto|rkey|export]
//
// -peer is the other side's IP address (the importer's host on an
// exporter, the exporter's on an importer), or this host's address that
// the other side dials; without it, the address of the default route's
// interface (loopback without one). -mode is what the program passes to
// share.WithMode (auto, the default, as without it).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
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
	shareReport
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
	peerFlag := flag.String("peer", "", "the other side's IP address, or this host's address it dials (default: the address of the default route's interface, else loopback)")
	modeFlag := flag.String("mode", "auto", "the mode the program asks share for (share.WithMode): auto, rkey or export")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s [-json] [-peer ADDR] [-mode auto|rkey|export]\n\nReports UCX versions, which memory domains can export memory keys, and what package share\nwould do here: its mode and why, the devices it binds for a peer, what that peer can reach.\n\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	want, err := parseMode(*modeFlag)
	if err != nil {
		fmt.Fprintln(os.Stderr, "doctor:", err)
		os.Exit(2)
	}
	var peer netip.Addr
	if *peerFlag != "" {
		if peer, err = netip.ParseAddr(*peerFlag); err != nil {
			fmt.Fprintf(os.Stderr, "doctor: -peer %q: an IP address\n", *peerFlag)
			os.Exit(2)
		}
		peer = peer.Unmap()
	}

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
	shareLines(&r.shareReport, want, peer)
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
	fmt.Println()
	printShare(r.shareReport)
}

// printShare prints what share would do here (shareReport), wrapped for a
// terminal.
func printShare(r shareReport) {
	const indent = "           "
	asked := ""
	if r.Requested != "auto" {
		asked = " (-mode " + r.Requested + ")"
	}
	if r.Err != "" {
		fmt.Println(wrap(fmt.Sprintf("share%s cannot run here: %s", asked, r.errShort), indent))
	} else {
		fmt.Println(wrap(fmt.Sprintf("share%s would run in %s mode: %s", asked, r.Mode, r.Reason), indent))
	}
	if r.Addr == "" {
		fmt.Println(wrap("  address  none: "+r.AddrWhy, indent))
	} else {
		fmt.Println(wrap(fmt.Sprintf("  address  %s: %s", r.Addr, r.AddrWhy), indent))
	}
	facing := fmt.Sprintf("share.DevicesFacing(%s)", r.Addr)
	var dev string
	switch {
	case r.DevicesEnv != "":
		dev = fmt.Sprintf("%s: UCX_NET_DEVICES from the environment, which share leaves as it is (%s is %q)", r.DevicesEnv, facing, r.Devices)
	case r.Addr == "":
		dev = "none bound: no address"
	case r.Devices == "":
		dev = fmt.Sprintf("none bound: %s is \"\"", facing)
	case r.Mode == "export":
		dev = fmt.Sprintf("%s (%s): what rkey mode's data paths would bind; export mode listens on none", r.Devices, facing)
	default:
		dev = fmt.Sprintf("%s (%s): the UCX_NET_DEVICES of each session's data path, listening on %s", r.Devices, facing, r.Addr)
	}
	fmt.Println(wrap("  devices  "+dev, indent))
	for _, w := range r.Warnings {
		fmt.Println(wrap("  WARNING  "+w, indent))
	}
	if r.Mode != "" {
		fmt.Printf("containment (%s mode, docs/security.md):\n", r.Mode)
	} else {
		fmt.Println("containment:")
	}
	for _, c := range r.Containment {
		fmt.Println(wrap("  - "+c, "    "))
	}
}

// wrap breaks s at spaces into lines of at most 100 columns, the later
// ones starting with indent.
func wrap(s, indent string) string {
	const width = 100
	var b strings.Builder
	line := 0
	for i, w := range strings.Split(s, " ") {
		switch {
		case i == 0:
		case line+1+len(w) > width && line > len(indent):
			b.WriteString("\n" + indent)
			line = len(indent)
		default:
			b.WriteByte(' ')
			line++
		}
		b.WriteString(w)
		line += len(w)
	}
	return b.String()
}

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}
