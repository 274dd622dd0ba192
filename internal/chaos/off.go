//go:build !chaos

package chaos

// Point does nothing outside a chaos build.
func Point(string) {}

// Armed is false outside a chaos build.
const Armed = false
