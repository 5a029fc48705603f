package postgres_test

import (
	"context"
	"testing"

	"github.com/fleet/fleet/cloud/postgres"
	"github.com/fleet/fleet/cloud/storetest"
)

// BenchmarkPointHistory is point history on PostgreSQL (storetest's
// PointHistoryBench): bytes per sample on disk in XOR chunks and as rows
// of the head, 7 days of a 1 s point as 1,000 buckets, and a raw page of
// 1,000 samples. The size is the point tables' with their indexes and
// TOAST (pg_total_relation_size) after VACUUM FULL (live rows only).
func BenchmarkPointHistory(b *testing.B) {
	s := openStores(b, migratedDB(b), nil, "relay-1")
	db := s.Store.(*postgres.DB)
	storetest.PointHistoryBench(b, s, func() int64 {
		ctx := context.Background()
		if _, err := db.Pool.Exec(ctx, `VACUUM FULL point_series, point_head, point_chunks`); err != nil {
			b.Fatal(err)
		}
		var n int64
		if err := db.Pool.QueryRow(ctx, `SELECT pg_total_relation_size('point_series') + pg_total_relation_size('point_head') + pg_total_relation_size('point_chunks')`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	})
}

// BenchmarkPointIngest is the agent store alone storing point samples on
// PostgreSQL: 2,000 devices sending a PointBatch of 50 samples each per
// round (storetest's PointIngestBench).
func BenchmarkPointIngest(b *testing.B) {
	storetest.PointIngestBench(b, openStores(b, migratedDB(b), nil, "relay-1"), 2000)
}
