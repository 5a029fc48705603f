package main

import "github.com/fleet/fleet/bench/benchreport"

// metricSets are the rows of the Go testing benchmarks, by the set name a
// make rule passes to `gotest --set`: which figure each reported metric is,
// and its target where ../shared/DESIGN.md gives one.
func metricSets() map[string][]benchreport.Metric {
	atMost := &benchreport.Target{Op: benchreport.AtMost}
	atLeast := &benchreport.Target{Op: benchreport.AtLeast}
	modbus := func(baud string) benchreport.Metric {
		return benchreport.Metric{Benchmark: "BenchmarkRTUTransaction/" + baud, Unit: "ms/txn",
			TargetFrom: "formula-ms", TargetScale: 1.10,
			Extra: []benchreport.Extra{{Unit: "formula-ms", Label: "formula", RowUnit: "ms"}, {Unit: "overhead-us", Label: "master overhead after t3.5", RowUnit: "µs"},
				{Unit: "failed", Label: "transactions cut by scheduling (left out)"}},
			Row: benchreport.Row{Area: "serial", Figure: "Modbus RTU transaction (read 10 registers), " + baud + " baud", Unit: "ms", Target: atMost,
				Notes: "median on a pty with a simulator pacing the wire; target: the wire time ((8 + 25 bytes) × 11 bits / baud + 2 × t3.5) + 10 %"}}
	}
	writerTx := func(batch string) benchreport.Metric {
		return benchreport.Metric{Benchmark: "BenchmarkWriterHeartbeatTx/" + batch, Unit: "cpu-ns/heartbeat", Scale: 1e-3,
			Extra: []benchreport.Extra{{Unit: "ns/op", Label: "wall time per heartbeat", Scale: 1e-3, RowUnit: "µs"}},
			Row: benchreport.Row{Area: "agent link", Figure: "store writer CPU per heartbeat, transactions of " + batch + " heartbeats", Unit: "µs",
				Notes: "for information: 20,000 heartbeats/s leave the single writer 50 µs each"}}
	}
	// perOp is an information row of a benchmark's time per operation
	// (ns/op) in unit, µs or ns.
	perOp := func(bench, area, figure, unit, notes string) benchreport.Metric {
		scale, _ := benchreport.Convert(1, "ns", unit)
		return benchreport.Metric{Benchmark: bench, Unit: "ns/op", Scale: scale,
			Row: benchreport.Row{Area: area, Figure: figure, Unit: unit, Notes: notes}}
	}
	// connHB is the allocation per heartbeat of BenchmarkConnHeartbeat's
	// sub-benchmark name, at most bytes, with its CPU time beside it.
	connHB := func(name, when string, bytes float64) benchreport.Metric {
		return benchreport.Metric{Benchmark: "BenchmarkConnHeartbeat/" + name, Unit: "B/op",
			Extra: []benchreport.Extra{{Unit: "allocs/op", Label: "allocations"}, {Unit: "ns/op", Label: "CPU", Scale: 1e-3, RowUnit: "µs"}},
			Row: benchreport.Row{Area: "agent link", Figure: "connection's allocation per heartbeat (8 channels, " + when + "), store left out", Unit: "B",
				Target: &benchreport.Target{Op: benchreport.AtMost, Value: bytes},
				Notes:  "the connection's share of the relay's allocation per heartbeat; target: what it allocated when the heartbeat's rules became a pure function (issue 25)"}}
	}
	// points is the rows of BenchmarkPointHistory on store (SQLite or
	// PostgreSQL): bytes per sample on disk and the samples route's two
	// query shapes (storetest.PointHistoryBench).
	points := func(store string) []benchreport.Metric {
		latency := func(sub, figure string, target float64) benchreport.Metric {
			return benchreport.Metric{Benchmark: "BenchmarkPointHistory/" + sub, Unit: "p99-ms",
				Extra: []benchreport.Extra{{Unit: "p50-ms", Label: "p50", RowUnit: "ms"}, {Unit: "cpu-ms/op", Label: "process CPU per query", RowUnit: "ms"}},
				Row: benchreport.Row{Area: "points", Figure: figure + " (" + store + ")", Unit: "ms",
					Target: &benchreport.Target{Op: benchreport.AtMost, Value: target},
					Notes:  "through Store.Points().PointSamples (the samples route's store call), history compacted as the relay leaves it"}}
		}
		return []benchreport.Metric{
			{Benchmark: "BenchmarkPointHistory/bytes", Unit: "bytes/sample",
				Extra: []benchreport.Extra{{Unit: "head-bytes/sample", Label: "one row per sample (the head table, with its key)", RowUnit: "B"},
					{Unit: "raw-bytes/sample", Label: "raw (time + float64)", RowUnit: "B"}},
				Row: benchreport.Row{Area: "points", Figure: "bytes per sample on disk, slowly moving 1 s point, 7 days (" + store + ")", Unit: "B",
					Target: &benchreport.Target{Op: benchreport.AtMost, Value: 4},
					Notes:  "Prometheus XOR chunks (tsdb/chunkenc) of up to 2,048 samples with their rows and indexes, live pages only; 604,800 samples of a register in tenths of a degree"}},
			latency("buckets-7d", "7 days of a 1 s point (604,800 samples) as 1,000 step buckets, p99", 50),
			latency("raw-1000", "raw page of 1,000 samples of a 1 s point, p99", 5),
			{Benchmark: "BenchmarkPointHistory/preview-7d", Unit: "p99-ms",
				Extra: []benchreport.Extra{{Unit: "p50-ms", Label: "p50", RowUnit: "ms"}, {Unit: "cpu-ms/op", Label: "process CPU per preview", RowUnit: "ms"},
					{Unit: "alerts", Label: "alerts the rule opens over the week"}},
				Row: benchreport.Row{Area: "rules", Figure: "rule preview over 7 days of a 1 s point (604,800 samples), one device, p99 (" + store + ")", Unit: "ms",
					Target: &benchreport.Target{Op: benchreport.AtMost, Value: 1000},
					Notes: "through Store.Rules().PreviewRule (POST /alert-rules/preview's store call), a threshold rule with for and clear replayed by the engine's state machine; " +
						"target: the panel shows the preview before a rule is saved, so a person waits on it, and 1 s is the limit for that wait to keep their flow (the densest history a point has, for one device)"}},
		}
	}
	// pointIngest is the row of BenchmarkPointIngest on store.
	pointIngest := func(store string) []benchreport.Metric {
		return []benchreport.Metric{
			{Benchmark: "BenchmarkPointIngest", Unit: "samples/s",
				Row: benchreport.Row{Area: "points", Figure: "point samples stored, agent store alone, 2,000 devices × 50 points (" + store + ")", Unit: "samples/s",
					Notes: "for information: the store's writer without websockets or decoding, one PointBatch of 50 samples per device per round, all devices at once; the targets (≥ 100,000/s on SQLite, ≥ 50,000/s on the cluster) are end to end, fleet-loadgen's"}},
		}
	}
	// routeP99 is the p99 of GET /devices/{id}/points/{pointId}/samples in
	// process (BenchmarkPointSamples' sub-benchmark name).
	routeP99 := func(name, what string) benchreport.Metric {
		return benchreport.Metric{Benchmark: "BenchmarkPointSamples/" + name, Unit: "p99-µs", Scale: 1e-3,
			Extra: []benchreport.Extra{{Unit: "ns/op", Label: "mean", Scale: 1e-6, RowUnit: "ms"}},
			Row: benchreport.Row{Area: "points", Figure: "samples route in process, " + what + " (SQLite), p99", Unit: "ms",
				Notes: "for information: handler and store, no network (cloud/api); the store's own p99 beside its target is bench-points"}}
	}
	return map[string][]benchreport.Metric{
		// bench-points: cloud/sqlite and cloud/postgres BenchmarkPointHistory.
		"points-sqlite":          points("SQLite"),
		"points-postgres":        points("PostgreSQL"),
		"points-ingest-sqlite":   pointIngest("SQLite"),
		"points-ingest-postgres": pointIngest("PostgreSQL"),
		// bench-points-micro: cloud/api BenchmarkPointSamples (the samples
		// route in process on SQLite, a day of a 1 s point) and
		// BenchmarkPointSamplesEncode; hw/canfd BenchmarkSignalDecode.
		"points-api": {
			routeP99("raw-1000", "raw page of 1,000 samples"), routeP99("raw-1000-csv", "raw page of 1,000 samples as CSV"),
			routeP99("buckets-1000-of-a-day", "1,000 step buckets of a day"),
			perOp("BenchmarkPointSamplesEncode/hand", "points", "raw page of 1,000 samples encoded by the handler (reused buffer)", "µs", "for information"),
			perOp("BenchmarkPointSamplesEncode/encoding-json", "points", "raw page of 1,000 samples encoded with encoding/json", "µs", "for information: what the handler's own encoding saves"),
			perOp("BenchmarkPointSamplesEncode/csv", "points", "raw page of 1,000 samples encoded as CSV", "µs", "for information"),
		},
		"points-canfd": {
			perOp("BenchmarkSignalDecode/big-16bit", "points", "CAN signal decode, 16-bit Motorola of a 64-byte FD payload", "ns", "for information"),
			perOp("BenchmarkSignalDecode/little-64bit", "points", "CAN signal decode, 64-bit Intel of a 64-byte FD payload", "ns", "for information"),
		},
		// bench-rules-micro: cloud/alert BenchmarkRules1000, the alert
		// engine's cost per sample with 1,000 rules in the organization.
		"rules-engine": {
			{Benchmark: "BenchmarkRules1000/metrics", Unit: "ns/sample", Scale: 1e-3,
				Row: benchreport.Row{Area: "rules", Figure: "rule cost per metrics sample, 1,000 rules in the organization (the device in scope of ~400 metric thresholds)", Unit: "µs",
					Target: &benchreport.Target{Op: benchreport.AtMost, Value: 2},
					Notes:  "the engine's MetricsStored on samples that decide nothing (half the thresholds held short of their for, half never reached), rules and device state cached: no store call; a sample is one record of the five metrics"}},
			{Benchmark: "BenchmarkRules1000/points", Unit: "ns/sample", Scale: 1e-3,
				Row: benchreport.Row{Area: "rules", Figure: "rule cost per point sample, 1,000 rules in the organization (~6 point thresholds per point)", Unit: "µs",
					Target: &benchreport.Target{Op: benchreport.AtMost, Value: 2},
					Notes:  "the engine's PointsStored on batches of 50 point samples that decide nothing, rules and device state cached: no store call"}},
		},
		// bench-notify: cloud/webhook BenchmarkEmailThroughOutbox and
		// BenchmarkSlackThroughOutbox, notifications per second from the
		// outbox on SQLite. DESIGN.md gives no figure; the target is what a
		// plant-wide incident asks: 1,000 devices crossing a rule at once
		// (a site losing power) told within 10 s, 100 a second.
		"notify-outbox": {
			{Benchmark: "BenchmarkEmailThroughOutbox", Unit: "mails/s",
				Row: benchreport.Row{Area: "rules", Figure: "e-mail notifications per second through the outbox (SQLite)", Unit: "e-mails/s",
					Target: &benchreport.Target{Op: benchreport.AtLeast, Value: 100},
					Notes: "2,000 alert.opened deliveries over 16 devices, each rendered at send time and accepted by a real SMTP server on loopback (STARTTLS and AUTH, one connection a message: test/rig/smtptest); " +
						"target: 1,000 devices crossing a rule at once (a site losing power) e-mailed within 10 s"}},
			{Benchmark: "BenchmarkSlackThroughOutbox", Unit: "messages/s",
				Row: benchreport.Row{Area: "rules", Figure: "chat (slack) notifications per second through the outbox (SQLite)", Unit: "messages/s",
					Target: &benchreport.Target{Op: benchreport.AtLeast, Value: 100},
					Notes: "2,000 alert.opened deliveries over 16 devices, each rendered at send time and posted as {\"text\"} to an HTTPS incoming webhook on loopback; " +
						"target: as e-mail's, 1,000 devices crossing a rule at once told within 10 s"}},
		},
		// bench-releases: cloud/relay BenchmarkReleaseDownload, one relay's
		// release download throughput. Its target follows from DESIGN.md's
		// rollout figure: 1,000 agents each fetching a 12 MiB release
		// within the 5 minutes is 1,000 × 12 MiB / 300 s ≈ 42 MB/s.
		"release-download": {
			{Benchmark: "BenchmarkReleaseDownload", Unit: "MB/s",
				Row: benchreport.Row{Area: "updates", Figure: "release download throughput of one relay, 64 agents × 12 MiB at once (SQLite)", Unit: "MB/s",
					Target: &benchreport.Target{Op: benchreport.AtLeast, Value: 42},
					Notes: "GET /agent/v1/releases/{id} over loopback, each agent with its own device token and connection, the binary read from the store's 1 MiB chunks; " +
						"target: 1,000 agents each fetching a 12 MiB release within the rollout benchmark's 5 minutes (1,000 × 12 MiB / 300 s)"}},
		},
		// bench-serial-modbus: hw/modbus BenchmarkRTUTransaction.
		"modbus": {modbus("9600"), modbus("115200")},
		// bench-serial-passthrough: agent/passthrough BenchmarkPassthroughVsSer2net.
		"passthrough": {
			{Benchmark: "BenchmarkPassthroughVsSer2net", Unit: "raw-uart-p50-us", TargetFrom: "raw-uart-ser2net-p50-us",
				Row: benchreport.Row{Area: "serial", Figure: "uart passthrough round trip p50 (32-byte messages)", Unit: "µs", Target: atMost,
					Notes: "target: at least as fast as ser2net (chardelay off) on the same pty pair, measured in the same run"}},
			{Benchmark: "BenchmarkPassthroughVsSer2net", Unit: "raw-uart-MB/s", TargetFrom: "raw-uart-ser2net-MB/s",
				Row: benchreport.Row{Area: "serial", Figure: "uart passthrough echo throughput (4 MiB)", Unit: "MB/s", Target: atLeast,
					Notes: "target: at least ser2net's throughput (chardelay off) in the same run"}},
			{Benchmark: "BenchmarkPassthroughVsSer2net", Unit: "modbus-rs485-p50-us",
				Extra: []benchreport.Extra{{Unit: "modbus-rs485-ser2net-p50-us", Label: "ser2net (chardelay off)", RowUnit: "µs"}},
				Row: benchreport.Row{Area: "serial", Figure: "rs485 Modbus passthrough round trip p50", Unit: "µs",
					Notes: "for information: ours holds the bus per transaction and keeps the 3.5-character silence between frames, which ser2net does not"}},
		},
		// bench-agentlink-store: cloud/sqlite BenchmarkAgentHeartbeats.
		"agentlink-store": {
			{Benchmark: "BenchmarkAgentHeartbeats", Unit: "heartbeats/s",
				Extra: []benchreport.Extra{{Unit: "jobs/tx", Label: "heartbeats per transaction"}, {Unit: "writer-busy", Label: "writer busy", Scale: 100, RowUnit: "%"}},
				Row: benchreport.Row{Area: "agent link", Figure: "heartbeats stored, store writer alone (20,000 connections, no websockets)", Unit: "heartbeats/s",
					Notes: "for information: the relay's whole budget is ≥ 20,000/s end to end (bench-agentlink)"}},
		},
		// bench-agentlink-store, second: cloud/sqlite BenchmarkWriterHeartbeatTx.
		"agentlink-writer": {writerTx("200"), writerTx("2000")},
		// bench-agentlink-store, third: cloud/agentlink
		// BenchmarkHeartbeatMergeAfterBurst, the writer's grouping of a
		// transaction's heartbeats by session (both stores use it).
		"agentlink-merge": {perOp("BenchmarkHeartbeatMergeAfterBurst", "agent link", "store writer's heartbeat merge, a transaction of 240 heartbeats after one of 16,000", "µs",
			"for information: the grouping of a transaction's heartbeats by session that both stores' writers run (agentlink.HeartbeatMerge), at 20,000 agents' steady rate after a reconnect storm's largest transaction; 53–62 µs when Reset cleared every slot the burst had grown (issue 31)")},
		// bench-agentlink-decode: cloud/agentlink BenchmarkDecodeHeartbeat.
		"agentlink-decode": {
			{Benchmark: "BenchmarkDecodeHeartbeat/cbor", Unit: "ns/op", Scale: 1e-3,
				Row: benchreport.Row{Area: "agent link", Figure: "heartbeat decode, CBOR (8 channels)", Unit: "µs",
					Target: &benchreport.Target{Op: benchreport.AtMost, Value: 3.1},
					Notes:  "CPU per heartbeat read by the agent endpoint from a current agent (fxamacker/cbor into the connection's reused heartbeat); target: the hand-written JSON fast path it replaced, 3.1 µs in issue 17"}},
			perOp("BenchmarkDecodeHeartbeat/cbor,_new_message", "agent link", "heartbeat decode, CBOR into a new message (same heartbeat)", "µs",
				"for information: what the connection's reused heartbeat saves"),
			perOp("BenchmarkDecodeHeartbeat/json", "agent link", "heartbeat decode, JSON (same message, as a connection decodes it)", "µs",
				"for information: CPU per heartbeat from an agent from before CBOR, which speaks JSON (encoding/json's behaviour: github.com/segmentio/encoding/json for a message of at most 128 brackets and braces, as a heartbeat is; encoding/json/v2's implementation with its v1 package's options for any other)"),
			perOp("BenchmarkDecodeHeartbeat/encoding/json", "agent link", "heartbeat decode, encoding/json (same message)", "µs",
				"for information: the same with encoding/json, the JSON decoder before"),
		},
		// bench-agentlink-decode, second: cloud/agentlink
		// BenchmarkConnHeartbeat, a connection's work per decoded heartbeat,
		// the store answering at once. Its targets are the allocations
		// measured when the heartbeat's rules became beat.go (issue 25):
		// none when nothing changed, 144 B in 2 when a channel's value and
		// the tunnel's peer count did.
		"agentlink-conn": {connHB("steady", "nothing changed", 0), connHB("changing", "a channel's value and the tunnel's peer count changed", 144)},
		// bench-api-micro: cloud/sqlite BenchmarkListDevices25 and
		// BenchmarkAuthenticateCached ("api-micro"), cloud/api
		// BenchmarkHandler ("api-micro-handler"; its store-devices and auth
		// sub-benchmarks are serial twins of the two store benchmarks and
		// are not run), cloud/api BenchmarkRouteLabel and cloud/relaymetrics
		// BenchmarkObserveRequest (the API's metrics).
		"api-micro": {
			perOp("BenchmarkListDevices25", "API", "store: list 25 of 10,000 devices (first and middle page, parallel)", "µs",
				"for information: the store's share of an uncached GET /devices"),
			perOp("BenchmarkAuthenticateCached", "API", "store: authenticate a known key (bcrypt cached, parallel)", "µs",
				"for information: bcrypt ran once for the whole benchmark (it fails otherwise)"),
		},
		"api-micro-handler": {
			perOp("BenchmarkHandler/devices", "API", "GET /devices handler in process (25 of 500 devices, no network)", "µs",
				"for information: 2 cores at 15,000 req/s leave 133 µs of CPU per request"),
			perOp("BenchmarkHandler/alerts", "API", "GET /alerts handler in process (100 alerts, no network)", "µs", "for information"),
		},
		// bench-audit: cloud/api BenchmarkAuditPutChannel, issue 30's
		// audit write cost per API write, with and without the record in
		// one run.
		"audit-ops": {
			{Benchmark: "BenchmarkAuditPutChannel", Unit: "audit-cost-%",
				Extra: []benchreport.Extra{{Unit: "with-req/s", Label: "with the record", RowUnit: "req/s"}, {Unit: "without-req/s", Label: "without", RowUnit: "req/s"}},
				Row: benchreport.Row{Area: "audit", Figure: "audit write cost per API write: PUT /serial/channels/{id} throughput lost to its audit record (SQLite)", Unit: "%",
					Target: &benchreport.Target{Op: benchreport.AtMost, Value: 5},
					Notes:  "two real HTTP servers on loopback on one SQLite store, one whose PUTs carry the key's actor (the record written in the change's transaction) and one without, alternating request by request, one client; throughput from each side's median request time"}},
			{Benchmark: "BenchmarkAuditPutChannel", Unit: "with-req/s",
				Row: benchreport.Row{Area: "audit", Figure: "PUT /serial/channels/{id} with its audit record, one client (SQLite)", Unit: "req/s", Notes: "for information: the A side of the row above"}},
			{Benchmark: "BenchmarkAuditPutChannel", Unit: "without-req/s",
				Row: benchreport.Row{Area: "audit", Figure: "PUT /serial/channels/{id} without an audit record, one client (SQLite)", Unit: "req/s", Notes: "for information: the B side, in the same run"}},
		},
		// BenchmarkLockedOut (cloud/apikey): a key id locked out from an
		// address, known and unknown side by side (issue 30: the same work
		// for both, so the lockout path tells nothing of which ids exist).
		"apikey-lockout": {
			perOp("BenchmarkLockedOut/known", "API", "a locked-out address's request with a real key id (refused)", "µs",
				"for information: beside the unknown id's row, which should read the same"),
			perOp("BenchmarkLockedOut/unknown", "API", "a locked-out address's request with an unknown key id (refused)", "µs",
				"for information: beside the known id's row"),
		},
		"api-routelabel": {
			perOp("BenchmarkRouteLabel/cached", "API", "a request's route label for metrics, cached", "ns", "for information"),
			perOp("BenchmarkRouteLabel/chi", "API", "a request's route label from chi's RoutePattern (what the cache saves)", "ns", "for information"),
		},
		"relay-metrics": {
			perOp("BenchmarkObserveRequest", "API", "Prometheus metrics cost of one API request (parallel)", "ns",
				"for information: counter and latency histogram of a cached label"),
		},
		// bench-rollout: bench/cmd/fleet-rolloutbench, 1,000 simulated
		// agents on one relay on SQLite updated by a rollout, and a badly
		// signed release stopped by maxFailures (issue 28).
		"rollout": {
			{Benchmark: "BenchmarkRollout", Unit: "less-health-s",
				Extra: []benchreport.Extra{{Unit: "total-s", Label: "from POST /rollouts to completed", RowUnit: "s"},
					{Unit: "health-s", Label: "health windows (one healthFor per wave)", RowUnit: "s"}},
				Row: benchreport.Row{Area: "rollouts", Figure: "1,000 simulated agents updated in three waves (1, 10, 100 %), each binary swapped and healthy, less the health windows", Unit: "s",
					Target: &benchreport.Target{Op: benchreport.Below, Value: 300},
					Notes: "one relay on SQLite; each agent downloads the release (bin/fleet-agent) from the relay with its device token, checks size and SHA-256, verifies the minisign signature, swaps the file, reconnects announcing the new version and reports healthy after healthFor (10 s); " +
						"target: DESIGN.md, < 5 minutes plus the health windows"}},
			{Benchmark: "BenchmarkRollout", Unit: "download-MB/s",
				Extra: []benchreport.Extra{{Unit: "busy-503", Label: "downloads answered 503 (the relay serving as many as it allows at once) and asked again after Retry-After"}},
				Row: benchreport.Row{Area: "rollouts", Figure: "release download throughput, one relay (SQLite)", Unit: "MB/s",
					Notes: "for information: bytes the agents downloaded over the time at least one download ran (the release's chunks read from the store)"}},
			{Benchmark: "BenchmarkRolloutBadRelease", Unit: "reached", TargetFrom: "first-wave",
				Extra: []benchreport.Extra{{Unit: "failures", Label: "failures when it stopped"}, {Unit: "max-failures", Label: "maxFailures"},
					{Unit: "stop-s", Label: "stopped after", RowUnit: "s"}},
				Row: benchreport.Row{Area: "rollouts", Figure: "devices a release signed by another key reached before the rollout stopped (maxFailures 5)", Unit: "devices", Target: atMost,
					Notes: "every agent refuses the release (the signature does not verify); the rollout must stop after maxFailures, within its first wave (target: that wave's size)"}},
		},
	}
}
