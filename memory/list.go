package memory

import (
	"context"
	"strings"
	"time"

	"github.com/golocker/locker/driver"
)

// List implements driver.Lister: the held keys under prefix in ascending
// order (driver.Page), plain locks and keys held by shared holds alike; the
// cursor is the last key of the previous page.
func (d *memDriver) List(ctx context.Context, prefix, cursor string, limit int) ([]driver.KeyStatus, string, error) {
	if err := d.check(ctx); err != nil {
		return nil, "", err
	}
	s := d.store
	s.mu.Lock()
	defer s.mu.Unlock()
	keys, next := driver.Page(func(yield func(string) bool) {
		for k := range s.locks {
			if strings.HasPrefix(k, prefix) && !yield(k) {
				return
			}
		}
		for k := range s.shares {
			if _, dup := s.locks[k]; !dup && strings.HasPrefix(k, prefix) && !yield(k) {
				return
			}
		}
	}, cursor, limit)
	now := time.Now()
	page := make([]driver.KeyStatus, 0, len(keys))
	for _, k := range keys {
		if st := s.statusLocked(k, now); st.Held {
			page = append(page, driver.KeyStatus{Key: k, Status: st})
		}
	}
	return page, next, nil
}
