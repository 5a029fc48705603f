package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/cloud/storetest"
)

// BenchmarkPointHistory is point history on SQLite (storetest's
// PointHistoryBench): bytes per sample on disk in XOR chunks and as rows
// of the head, 7 days of a 1 s point as 1,000 buckets, and a raw page of
// 1,000 samples. The size is the file's after VACUUM (live pages only).
func BenchmarkPointHistory(b *testing.B) {
	s := openStores(b, filepath.Join(b.TempDir(), "fleet.db"), nil)
	db := s.Store.(*sqlite.DB)
	storetest.PointHistoryBench(b, s, func() int64 {
		ctx := context.Background()
		if _, err := db.W.ExecContext(ctx, `VACUUM`); err != nil {
			b.Fatal(err)
		}
		var pages, size int64
		if err := db.W.QueryRowContext(ctx, `SELECT (SELECT page_count FROM pragma_page_count()), (SELECT page_size FROM pragma_page_size())`).Scan(&pages, &size); err != nil {
			b.Fatal(err)
		}
		return pages * size
	})
}

// BenchmarkPointIngest is the agent store alone storing point samples on
// SQLite: 2,000 devices sending a PointBatch of 50 samples each per round
// (storetest's PointIngestBench).
func BenchmarkPointIngest(b *testing.B) {
	storetest.PointIngestBench(b, openStores(b, filepath.Join(b.TempDir(), "fleet.db"), nil), 2000)
}
