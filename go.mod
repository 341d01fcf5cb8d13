module github.com/golocker/locker

go 1.24
