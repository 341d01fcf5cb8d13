//go:build race

package locker

// raceEnabled: the race detector changes what allocates.
const raceEnabled = true
