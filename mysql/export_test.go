package mysql

// SQL texts for the raw database/sql floor of the benchmarks, which must run
// exactly the Locker's statements.
var (
	AcquireSQL = func(table string) string { return newStatements(table).acquire }
	ReleaseSQL = func(table string) string { return newStatements(table).release }
	InsertSQL  = func(table string) string { return newStatements(table).insert }
)

// CreateTableSQL is the DDL New runs, for the test that the package doc shows
// the same columns.
var CreateTableSQL = createTableSQL

// LockName is the named lock of a key, for tests that watch it.
func LockName(database, table, key string) string {
	return (&notifier{salt: database + "\x00" + table + "\x00"}).name(key)
}
