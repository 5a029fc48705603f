// Package walindex tells whether anything was committed to a SQLite
// database in WAL mode, by any connection of any process, at the cost of a
// few loads from memory: it maps the start of the database's WAL index (the
// -shm file) read-only and shared, and reads its header, which every commit
// rewrites (https://www.sqlite.org/walformat.html#the_wal_index_header).
// Two equal headers read at two moments mean nothing was committed in
// between. cloud/sqlite's data version (cloud.Versioner) is built on it.
//
// The mapping exists on Linux only; elsewhere Open fails and the caller
// falls back on PRAGMA data_version.
package walindex

// Header is one copy of the WAL-index header: 48 bytes (version, change
// counter, page size, last valid frame, checksums, salts).
type Header [12]uint32
