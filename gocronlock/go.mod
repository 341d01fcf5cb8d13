module github.com/golocker/locker/gocronlock

go 1.25

require (
	github.com/go-co-op/gocron/v2 v2.21.2
	github.com/golocker/locker v0.1.0
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/jonboulle/clockwork v0.5.0 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
)

replace github.com/golocker/locker => ..
