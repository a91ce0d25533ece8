package ucp

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ucxgo/ucx/ucs"
	"github.com/ucxgo/ucx/uct"
)

// checkImportable decides on the machine's memory-domain reports; here the
// reports are those of an imagined BlueField host, so that the branches a
// machine without mlx5 hardware cannot reach are exercised.
func TestCheckImportableAgainstLocalMDs(t *testing.T) {
	gid := []byte{'i', 'b', 1, 2, 3, 4, 5, 6, 7, 8}
	desc := &Descriptor{mds: []DescriptorMD{{Mkey: make([]byte, 6), GlobalID: gid}}}
	withReports := func(reports ...uct.MDReport) {
		saved := localMDs
		t.Cleanup(func() { localMDs = saved })
		localMDs = func() ([]uct.MDReport, error) { return reports, nil }
	}
	ctx := &Context{}

	withReports(uct.MDReport{Component: "ib", MD: "mlx5_0", Attr: &uct.Attr{GlobalID: gid}})
	require.NoError(t, ctx.checkImportable(desc))

	// Same adapter, but the local MD cannot export (DevX off): UCX would abort.
	// A real report of an MD that cannot export, given the adapter's id.
	real, err := uct.Probe()
	require.NoError(t, err)
	var cannot uct.MDReport
	for _, r := range real {
		if r.MD == "posix" {
			cannot = r
		}
	}
	require.Error(t, cannot.HaveExportedMkey())
	attr := *cannot.Attr
	attr.GlobalID = gid
	cannot.Attr = &attr
	withReports(cannot)
	err = ctx.checkImportable(desc)
	require.ErrorIs(t, err, ucs.ErrUnsupported)
	assert.Contains(t, err.Error(), "posix/posix has the descriptor's global MD id but cannot export")
	assert.Contains(t, err.Error(), "md lacks UCT_MD_FLAG_EXPORTED_MKEY")

	withReports(uct.MDReport{Component: "ib", MD: "mlx5_1", Attr: &uct.Attr{GlobalID: []byte("ib-other")}})
	require.ErrorIs(t, ctx.checkImportable(desc), ucs.ErrUnreachable)

	require.NoError(t, ctx.checkImportable(&Descriptor{dummy: true}))
}
