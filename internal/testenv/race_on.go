//go:build race

package testenv

// RaceBuild: this binary runs with the race detector.
const RaceBuild = true
