package share

import "time"

// ExporterOption configures NewExporter.
type ExporterOption interface{ applyExporter(*exporterOptions) }

// ImporterOption configures Dial and NewImporter.
type ImporterOption interface{ applyImporter(*importerOptions) }

// Option configures either side: it is an ExporterOption and an
// ImporterOption, and means the same on both.
type Option interface {
	ExporterOption
	ImporterOption
}

type exporterOption func(*exporterOptions)

func (f exporterOption) applyExporter(o *exporterOptions) { f(o) }

type importerOption func(*importerOptions)

func (f importerOption) applyImporter(o *importerOptions) { f(o) }

// option is an Option: one setting, applied to whichever side takes it.
type option struct {
	e exporterOption
	i importerOption
}

func (b option) applyExporter(o *exporterOptions) { b.e(o) }
func (b option) applyImporter(o *importerOptions) { b.i(o) }

// WithHandshakeTimeout bounds each step of a session that takes no ctx
// of its own (default DefaultHandshakeTimeout). At the exporter: a new
// session's handshake after the hello (Limits.Hello bounds that) and, in
// rkey mode, the start of its data-path process and its data connection.
// At the importer: the handshake, within the ctx of Dial or NewImporter,
// and the steps of Importer.Close, Buffer.Close, Peer.Close and
// PeerRegion.Close (after it, what is left is ended by force).
func WithHandshakeTimeout(d time.Duration) Option {
	return option{
		func(o *exporterOptions) { o.handshake = d },
		func(o *importerOptions) { o.handshake = d },
	}
}

// WithUCXConfig sets a UCX configuration value (ucp.WithConfig) of the
// side's UCX contexts, after the ones share applies itself
// (ExporterConfig, ExportModeConfig, and in rkey mode NET_DEVICES, the
// device facing the other side). At the exporter: in export mode its own
// context, in rkey mode each data-path process's. At the importer: its
// context, in the data-path process in rkey mode.
func WithUCXConfig(name, value string) Option {
	return option{
		func(o *exporterOptions) { o.config = append(o.config, [2]string{name, value}) },
		func(o *importerOptions) { o.config = append(o.config, [2]string{name, value}) },
	}
}

// WithExpvarName publishes the side's Stats through package expvar, as
// the key "exporter.<name>" or "importer.<name>" of the map "ucx",
// until Close. A name another exporter (importer) of this process holds
// makes NewExporter (Dial, NewImporter) fail with an error wrapping
// ucs.ErrAlreadyExists.
func WithExpvarName(name string) Option {
	return option{
		func(o *exporterOptions) { o.name = name },
		func(o *importerOptions) { o.name = name },
	}
}
