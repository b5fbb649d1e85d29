//go:build race

package testutil

// raceEnabled builds the airlock binary with -race when the tests run with it.
const raceEnabled = true
