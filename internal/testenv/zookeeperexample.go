package testenv

// SharedZooKeeper returns the ZooKeeper server shared by the tests of this
// test binary (the one [ZooKeeper] returns), for code that has no
// testing.TB: Example functions, whose server TestMain provides. It starts
// the server on first use; [Shutdown] stops it. Pass its error to
// [ExamplesUnavailable].
func SharedZooKeeper() (*ZooKeeperServer, error) {
	return shared("zookeeper", startZooKeeper)
}
