//go:build !race

package ucp_test

const raceDetector = false
