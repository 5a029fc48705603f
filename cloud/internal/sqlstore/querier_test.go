package sqlstore

import (
	"errors"
	"testing"
)

// TestDeleteBatches runs batches that delete a full limit, then fewer, or
// fail: the batches stop at the first short or failed one, and the total
// counts the rows of the batches that succeeded.
func TestDeleteBatches(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		batches []int64 // -1 fails
		total   int64
		calls   int
		err     error
	}{
		{"one short batch", []int64{3}, 3, 1, nil},
		{"none left", []int64{0}, 0, 1, nil},
		{"full then short", []int64{10, 10, 4}, 24, 3, nil},
		{"full then empty", []int64{10, 0}, 10, 2, nil},
		{"fails after a full one", []int64{10, -1, 10}, 10, 2, boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			total, err := DeleteBatches(10, func() (int64, error) {
				n := tc.batches[calls]
				calls++
				if n < 0 {
					return 5, boom
				}
				return n, nil
			})
			if total != tc.total || calls != tc.calls || !errors.Is(err, tc.err) {
				t.Errorf("total %d after %d batches, err %v; want %d after %d, err %v", total, calls, err, tc.total, tc.calls, tc.err)
			}
		})
	}
}
