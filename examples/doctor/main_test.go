package main

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/internal/testproc"
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
