// Package history is the results store: every finished run, its plan and
// fingerprint, environment, per-step summaries, knee verdicts and the
// per-step latency histograms in their lossless form, kept in one database
// so runs can be listed, trended and compared over weeks.
//
// One code path over database/sql serves both backends: an embedded SQLite
// file (the pure-Go modernc.org/sqlite driver, so static binaries keep
// working) and a shared PostgreSQL server (pgx), chosen by the location
// given to Open: a postgres:// URL, or else a file path. The schema is
// versioned; Open applies the migrations a database lacks, each in its own
// transaction, and refuses a database newer than this build.
//
// A run is written in one transaction, so a crash or SIGKILL leaves it
// either whole or absent; storing the same run id twice is a no-op.
// Compare judges two runs step by step with bootstrap confidence intervals
// computed from the histograms, and Trend follows one metric over runs.
package history
