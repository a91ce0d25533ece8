// Package ucp will be the UCP layer of ucx-go: contexts, workers,
// endpoints, memory mapping with export (ucp_memh_pack with
// UCP_MEMH_PACK_FLAG_EXPORT) and import (ucp_mem_map with
// exported_memh_buffer), remote keys, RMA and active messages. It builds on
// package cgo for every C call, package ucs for errors and the ownership
// model of package uct. It is empty until that work lands.
package ucp
