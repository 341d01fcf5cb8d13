package postgres

// Statements are SQL statements a Locker runs on a lock table, for
// benchmarks that must run the same ones by hand.
//
// Acquire takes the row when it is missing, free or expired. Its args are
// key, owner, label, TTL in µs, and a fence in µs since the epoch on the
// database clock, after which it takes nothing. It returns one row: the
// fencing token taken or NULL, the holder's remaining µs or NULL, and the
// database clock in µs.
//
// Release frees the row and notifies channel (the table's name). Its args
// are key, owner, token, channel; it returns one row when the row was
// the owner's.
type Statements struct {
	Acquire, Release string
}

// SQL returns the statements a Locker runs on lock table table. The table
// name is not checked: pass a name New accepts.
func SQL(table string) Statements {
	s := newStatements(table)
	return Statements{Acquire: s.acquire, Release: s.release}
}
