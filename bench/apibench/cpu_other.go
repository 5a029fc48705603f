//go:build !linux

package apibench

import "time"

// processCPU is not measured outside Linux.
func processCPU() time.Duration { return 0 }
