package postgres

import (
	"context"
	"errors"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/shared/resource"
)

// recJob is a queued batch of metric samples (an agent's Records without
// events, the usual kind), which the writer stores together with the other
// such batches of its transaction: one INSERT for all their samples and one
// UPDATE for their devices' last sequence numbers (applyRecords), instead
// of a savepoint and three statements, each a round trip, per batch. A
// batch that carries events goes through its job's apply, in a savepoint of
// its own (event ids may collide, see insertAgentEvents).
type recJob struct {
	dev    agentlink.Device
	ms     []*resource.MetricSample
	points *pointBatch                // its point samples, out and fresh set when stored
	series *sqlstore.PointSeriesCache // the agent store's
	maxSeq uint64
	out    *agentlink.RecordsOut // set by whichever path stores the batch
}

// errRecordsBulk wraps an error of applyRecords: the writer runs the
// transaction again with each records job in a savepoint of its own, so
// that a failing batch fails alone.
type errRecordsBulk struct{ err error }

func (e errRecordsBulk) Error() string { return e.err.Error() }
func (e errRecordsBulk) Unwrap() error { return e.err }

// applyRecords stores recs in tx: their samples with one INSERT whose
// RETURNING names the rows actually inserted (a resent sample is not), and
// their devices' last stored sequence numbers with one UPDATE, devices in id
// order. Each job's out is what the same batch stored alone would report:
// its new samples in order (a sample two batches of one transaction carry
// goes to the first), and the device's last sequence number after the
// transaction, which commits every batch of it together.
func applyRecords(ctx context.Context, tx pgx.Tx, recs []*recJob) error {
	n := 0
	for _, r := range recs {
		n += len(r.ms)
	}
	type key struct {
		dev string
		at  int64
	}
	inserted := make(map[key]int, n)
	if n > 0 {
		dev, at, missing := make([]string, 0, n), make([]int64, 0, n), make([]int64, 0, n)
		cpu, mem, disk, temp, load := make([]float64, 0, n), make([]float64, 0, n), make([]float64, 0, n), make([]float64, 0, n), make([]float64, 0, n)
		for _, r := range recs {
			for _, m := range r.ms {
				dev, at = append(dev, r.dev.ID), append(at, m.CapturedAt.UnixMilli())
				missing = append(missing, resource.MissingMask(m.Missing))
				cpu, mem, disk = append(cpu, m.CPUPct), append(mem, m.MemPct), append(disk, m.DiskUsedPct)
				temp, load = append(temp, m.TempCPU), append(load, m.LoadAvg1)
			}
		}
		rows, err := tx.Query(ctx, `INSERT INTO metrics (device_id, captured_at, cpu_pct, mem_pct, disk_used_pct, temp_cpu, load_avg1, missing)
			SELECT * FROM unnest($1::text[], $2::bigint[], $3::float8[], $4::float8[], $5::float8[], $6::float8[], $7::float8[], $8::int[])
			ON CONFLICT DO NOTHING RETURNING device_id, captured_at`, dev, at, cpu, mem, disk, temp, load, missing)
		if err != nil {
			return errRecordsBulk{storeError("postgres: insert metrics: %w", err)}
		}
		var k key
		if _, err := pgx.ForEachRow(rows, []any{&k.dev, &k.at}, func() error {
			inserted[k]++
			return nil
		}); err != nil {
			return errRecordsBulk{storeError("postgres: insert metrics: %w", err)}
		}
	}

	if len(recs) > 0 {
		batches := make([]*pointBatch, len(recs))
		for i, r := range recs {
			batches[i] = r.points
		}
		if err := insertPoints(ctx, tx, recs[0].series, batches); err != nil {
			return errRecordsBulk{err}
		}
	}

	seq := map[string]int64{}
	for _, r := range recs {
		seq[r.dev.ID] = max(seq[r.dev.ID], int64(r.maxSeq))
	}
	ids := slices.Sorted(maps.Keys(seq))
	seqs := make([]int64, len(ids))
	for i, id := range ids {
		seqs[i] = seq[id]
	}
	rows, err := tx.Query(ctx, `UPDATE devices d SET agent_last_seq = GREATEST(d.agent_last_seq, v.seq)
		FROM unnest($1::text[], $2::bigint[]) AS v(id, seq) WHERE d.id = v.id RETURNING d.id, d.agent_last_seq`, ids, seqs)
	if err != nil {
		return errRecordsBulk{storeError("postgres: last seq: %w", err)}
	}
	last := make(map[string]int64, len(ids))
	var id string
	var v int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &v}, func() error {
		last[id] = v
		return nil
	}); err != nil {
		return errRecordsBulk{storeError("postgres: last seq: %w", err)}
	}

	for _, r := range recs {
		l, ok := last[r.dev.ID]
		if !ok {
			return errRecordsBulk{storeError("postgres: last seq of %s: %w", r.dev.ID, errors.New("no such device"))}
		}
		out := agentlink.RecordsOut{LastSeq: uint64(l), Points: r.points.out}
		for _, m := range r.ms {
			if k := (key{r.dev.ID, m.CapturedAt.UnixMilli()}); inserted[k] > 0 {
				out.Metrics = append(out.Metrics, *m)
				inserted[k]--
			}
		}
		*r.out = out
	}
	return nil
}
