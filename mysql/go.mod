module github.com/golocker/locker/mysql

go 1.26.0

require (
	github.com/go-sql-driver/mysql v1.8.1
	github.com/golocker/locker v0.1.0
	gorm.io/driver/mysql v1.6.0
	gorm.io/gorm v1.31.2
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/jinzhu/inflection v1.0.0 // indirect
	github.com/jinzhu/now v1.1.5 // indirect
	golang.org/x/text v0.43.0 // indirect
)

replace github.com/golocker/locker => ..
