package main

import (
	"crypto/rand"
	"encoding/json"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/testproc"
	"github.com/ucxgo/ucx/share"
	"github.com/ucxgo/ucx/ucs"
	"github.com/ucxgo/ucx/uct"
)

// The test binary doubles as the doctor: its role "doctor" runs main.
func init() {
	testproc.Role("doctor", func() int { main(); return 0 })
}

func TestMain(m *testing.M) {
	testproc.Main()
	os.Exit(m.Run())
}

func runDoctor(t *testing.T, args ...string) string {
	t.Helper()
	out, err := testproc.Run(t.Context(), testproc.Spec{Role: "doctor", Args: args})
	require.NoError(t, err, "doctor failed:\n%s", out)
	return string(out)
}

func TestDoctorListsEveryMDWithVerdict(t *testing.T) {
	out := runDoctor(t)
	assert.Regexp(t, `UCX built against 1\.\d+\.\d+, loaded 1\.\d+\.\d+ \(uct_md_attr_v2_t layout of UCX 1\.(16|18|22) and later\)`, out)
	reports, err := uct.Probe()
	require.NoError(t, err)
	for _, name := range []string{"self", "tcp", "sysv", "posix", "cma"} {
		line := regexp.MustCompile(`(?m)^\S+\s+` + name + `\s+.*$`).FindString(out)
		require.NotEmpty(t, line, "no line for md %q in:\n%s", name, out)
		for _, r := range reports {
			if r.MD == name && r.HaveExportedMkey() != nil {
				assert.Contains(t, line, "cannot export: md lacks UCT_MD_FLAG_EXPORTED_MKEY")
			}
		}
	}
}

func TestDoctorJSON(t *testing.T) {
	var r report
	require.NoError(t, json.Unmarshal([]byte(runDoctor(t, "-json")), &r))
	assert.NotEmpty(t, r.Built)
	assert.Equal(t, ucs.LoadedVersion().String(), r.Loaded)
	assert.Equal(t, ucs.ABILayout(), r.Layout)
	names := map[string]bool{}
	for _, m := range r.MDs {
		names[m.MD] = true
		if !m.CanExport {
			assert.NotEmpty(t, m.Reason, "md %q: a verdict without a reason", m.MD)
		}
	}
	for _, name := range []string{"self", "tcp", "sysv", "posix", "cma"} {
		assert.True(t, names[name], "md %q missing from JSON", name)
	}
}

// shareSays is what share's API says here for mode: the mode an exporter
// runs in and why, or why NewExporter fails.
func shareSays(t *testing.T, mode share.Mode) (got, why, failed string) {
	t.Helper()
	secret := make([]byte, share.MinSecret)
	rand.Read(secret)
	sealer, err := share.NewHMACSealer(secret)
	require.NoError(t, err)
	exp, err := share.NewExporter(sealer, share.WithMode(mode))
	if err != nil {
		return "", "", err.Error()
	}
	defer func() { require.NoError(t, exp.Close()) }()
	m, why := exp.Mode()
	return m.String(), why, ""
}

func doctorJSON(t *testing.T, args ...string) report {
	t.Helper()
	out := runDoctor(t, append([]string{"-json"}, args...)...)
	var r report
	require.NoError(t, json.Unmarshal([]byte(out), &r), "doctor -json printed:\n%s", out)
	return r
}

// flat is out with every run of white space one space: the text wraps
// long lines.
func flat(out string) string { return strings.Join(strings.Fields(out), " ") }

func TestDoctorShareJSON(t *testing.T) {
	mode, why, failed := shareSays(t, share.ModeAuto)
	for _, args := range [][]string{nil, {"-peer", "127.0.0.1"}} {
		r := doctorJSON(t, args...)
		assert.Equal(t, ucs.BuiltVersion().String(), r.Built)
		assert.Equal(t, ucs.LoadedVersion().String(), r.Loaded)
		assert.Equal(t, ucs.ABILayout(), r.Layout)
		assert.Equal(t, "auto", r.Requested)
		assert.Equal(t, mode, r.Mode, "doctor %v", args)
		assert.Equal(t, why, r.Reason, "doctor %v", args)
		assert.Equal(t, failed, r.Err, "doctor %v", args)
		addr, err := netip.ParseAddr(r.Addr)
		require.NoError(t, err, "share_address %q (%s)", r.Addr, r.AddrWhy)
		assert.Equal(t, share.DevicesFacing(addr), r.Devices, "doctor %v", args)
		assert.NotEmpty(t, r.Devices, "the address share binds (%s) is on no interface", addr)
		assert.Equal(t, os.Getenv("UCX_NET_DEVICES"), r.DevicesEnv)
		require.NotEmpty(t, r.Containment)
		if mode == "rkey" {
			assert.Contains(t, strings.Join(r.Containment, "\n"), "data path is a process of its own")
		}
		if len(args) == 0 {
			assert.Empty(t, r.Peer)
			assert.Regexp(t, `default route's interface|loopback`, r.AddrWhy)
			continue
		}
		assert.Equal(t, "127.0.0.1", r.Peer)
		assert.Equal(t, "127.0.0.1", r.Addr)
		v := ucs.LoadedVersion()
		if mode == "rkey" && v.Minor == 20 && r.DevicesEnv == "" {
			assert.Contains(t, strings.Join(r.Warnings, "\n"), "loopback", "UCX 1.20 refuses rkey sessions over loopback")
		} else {
			assert.Empty(t, r.Warnings)
		}
	}
}

func TestDoctorShareText(t *testing.T) {
	mode, why, failed := shareSays(t, share.ModeAuto)
	out := runDoctor(t, "-peer", "127.0.0.1")
	text := flat(out)
	assert.Contains(t, text, "UCX built against "+ucs.BuiltVersion().String()+", loaded "+ucs.LoadedVersion().String()+
		" (uct_md_attr_v2_t layout of UCX "+ucs.ABILayout()+" and later)")
	if failed != "" {
		assert.Contains(t, text, "share cannot run here: ", out)
	} else {
		assert.Contains(t, text, "share would run in "+mode+" mode: "+flat(why)+" address ", out)
	}
	assert.Contains(t, text, "address 127.0.0.1: -peer 127.0.0.1 is this host's own", out)
	dev := share.DevicesFacing(netip.MustParseAddr("127.0.0.1"))
	require.NotEmpty(t, dev)
	if os.Getenv("UCX_NET_DEVICES") == "" {
		assert.Contains(t, text, "devices "+dev+" (share.DevicesFacing(127.0.0.1))", out)
	}
	// The text says what the JSON says.
	r := doctorJSON(t, "-peer", "127.0.0.1")
	require.NotEmpty(t, r.Containment)
	if failed == "" {
		assert.Contains(t, text, "containment ("+mode+" mode, docs/security.md):")
	}
	for _, c := range r.Containment {
		assert.Contains(t, text, "- "+flat(c), out)
	}
}

func TestDoctorShareModeFlag(t *testing.T) {
	for _, m := range []share.Mode{share.ModeRkey, share.ModeExport} {
		mode, why, failed := shareSays(t, m)
		r := doctorJSON(t, "-mode", m.String())
		text := flat(runDoctor(t, "-mode", m.String()))
		assert.Equal(t, m.String(), r.Requested)
		assert.Equal(t, mode, r.Mode, "-mode %s", m)
		assert.Equal(t, why, r.Reason, "-mode %s", m)
		assert.Equal(t, failed, r.Err, "-mode %s", m)
		if failed != "" {
			assert.Contains(t, text, "share (-mode "+m.String()+") cannot run here: ")
			assert.Equal(t, []string{"none: share cannot run in this mode here."}, r.Containment)
		} else {
			assert.Contains(t, text, "share (-mode "+m.String()+") would run in "+mode+" mode: "+why)
		}
	}
}

func TestDoctorNetDevicesFromEnvironment(t *testing.T) {
	out, err := testproc.Run(t.Context(), testproc.Spec{Role: "doctor", Args: []string{"-json", "-peer", "127.0.0.1"},
		Env: []string{"UCX_NET_DEVICES=lo"}})
	require.NoError(t, err, "doctor failed:\n%s", out)
	var r report
	require.NoError(t, json.Unmarshal(out, &r), "%s", out)
	assert.Equal(t, "lo", r.DevicesEnv)
	assert.Equal(t, share.DevicesFacing(netip.MustParseAddr("127.0.0.1")), r.Devices)
	assert.Empty(t, r.Warnings, "share checks nothing of a device the environment names")
	out, err = testproc.Run(t.Context(), testproc.Spec{Role: "doctor", Args: []string{"-peer", "127.0.0.1"},
		Env: []string{"UCX_NET_DEVICES=lo"}})
	require.NoError(t, err, "doctor failed:\n%s", out)
	assert.Contains(t, flat(string(out)), "devices lo: UCX_NET_DEVICES from the environment, which share leaves as it is")
}

func TestDoctorRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-peer", "dpu.example"}, {"-mode", "fast"}} {
		out, err := testproc.Run(t.Context(), testproc.Spec{Role: "doctor", Args: args})
		assert.Error(t, err, "doctor %v ran:\n%s", args, out)
		assert.Contains(t, string(out), args[1], "doctor %v names the bad value", args)
	}
}
