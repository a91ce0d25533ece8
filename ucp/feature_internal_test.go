package ucp

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ucxgo/ucx/cgo"
)

// TestFeatureBitsAreUCXs: the public Feature bits are the UCP_FEATURE_* of
// the UCX header the C layer was built against.
func TestFeatureBitsAreUCXs(t *testing.T) {
	for _, c := range []struct {
		public Feature
		header uint64
	}{
		{FeatureTag, cgo.FeatureTag}, {FeatureRMA, cgo.FeatureRMA},
		{FeatureAMO32, cgo.FeatureAMO32}, {FeatureAMO64, cgo.FeatureAMO64},
		{FeatureWakeup, cgo.FeatureWakeup}, {FeatureStream, cgo.FeatureStream},
		{FeatureAM, cgo.FeatureAM}, {FeatureExportedMemh, cgo.FeatureExportedMemh},
	} {
		assert.Equal(t, c.header, uint64(c.public))
	}
}
