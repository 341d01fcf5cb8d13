package testenv

// SharedMySQL returns the MariaDB server shared by the tests of this test
// binary (the one [MySQL] returns), for code that has no testing.TB: Example
// functions, whose server TestMain provides. It starts the server on first
// use; [Shutdown] stops it. Pass its error to [ExamplesUnavailable].
func SharedMySQL() (*MySQLServer, error) {
	return shared("mysql", startMySQL)
}
