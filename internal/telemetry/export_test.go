package telemetry

import "time"

// SetActiveWindow shortens ActiveWindow for a test; the returned function restores it.
func SetActiveWindow(d time.Duration) func() {
	old := activeWindow
	activeWindow = d
	return func() { activeWindow = old }
}
