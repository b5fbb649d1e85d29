//go:build race

package audit

// raceEnabled: the race detector makes reading a gigabyte take minutes.
const raceEnabled = true
