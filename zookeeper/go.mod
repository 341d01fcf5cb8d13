module github.com/golocker/locker/zookeeper

go 1.25

require (
	github.com/go-zookeeper/zk v1.0.4
	github.com/golocker/locker v0.1.0
)

replace github.com/golocker/locker => ..
