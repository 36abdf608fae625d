//go:build race

package chaos_test

// raceBuild: this test binary runs with the race detector, so the service
// binaries are built with it too.
const raceBuild = true
