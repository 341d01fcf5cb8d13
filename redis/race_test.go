//go:build race

package redis

// raceEnabled: the race detector changes what allocates.
const raceEnabled = true
