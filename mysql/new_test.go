package mysql_test

import (
	"errors"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/golocker/locker"
	"github.com/golocker/locker/mysql"
)

// TestNewRefusesZeroClients: a *gorm.DB that was not opened with gorm.Open
// is refused by New with an error naming it, never a panic later.
func TestNewRefusesZeroClients(t *testing.T) {
	for name, db := range map[string]*gorm.DB{"zero": {}, "nil": nil, "no dialector": {Config: &gorm.Config{}}} {
		l, err := mysql.New(db)
		if err == nil {
			_ = l.Close()
			t.Errorf("New(%s *gorm.DB) must fail", name)
			continue
		}
		if !errors.Is(err, locker.ErrInvalidOption) || !strings.Contains(err.Error(), "gorm.DB") {
			t.Errorf("New(%s *gorm.DB) = %v; want an error matching ErrInvalidOption that names gorm.DB", name, err)
		}
	}
}
