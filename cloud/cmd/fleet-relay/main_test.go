package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fleet/fleet/cloud/relay"
)

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{fmt.Errorf("%w: --rate-limit must be at least 1", relay.ErrUsage), 2},
		{errors.New("database relay.db does not exist"), 1},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
