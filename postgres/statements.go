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
//
// Hold takes a shared hold (a permit or a read hold) of a key no lock or
// shared hold holds, in the key's row, as the key's first holder. Its args
// are key, owner, label, TTL in µs, fence in µs (as Acquire's), mode (1
// for a permit, as driver.Permits), weight and limit. It returns the
// hold's fencing token, or no row when the key was not free or the fence
// passed.
//
// Leave ends a hold that Hold took, frees the key's row, and notifies
// channel. Its args are key, owner, channel, token; it
// returns one row when the hold was the owner's.
type Statements struct {
	Acquire, Release string
	Hold, Leave      string
}

// SQL returns the statements a Locker runs on lock table table. The table
// name is not checked: pass a name New accepts.
func SQL(table string) Statements {
	s := newStatements(table)
	f := newFirstStatements(table)
	return Statements{Acquire: s.acquire, Release: s.release, Hold: f.take, Leave: f.release}
}
