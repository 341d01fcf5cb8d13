package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"

	"github.com/golocker/locker/driver"
)

//go:embed setdata.lua
var setDataLua string

// dataSep ends the label in a lock value's label part when the lock
// carries data (locker.WithData), which follows it. A label never
// contains it: locker.WithOwnerLabel refuses a NUL byte.
const dataSep = '\x00'

// labelData is the label part of a lock value: the label, then dataSep
// and the data when there is data.
func labelData(label string, data []byte) string {
	if len(data) == 0 {
		return label
	}
	return label + string(dataSep) + string(data)
}

// splitLabel takes a lock value's label part apart: the label and the
// data (nil: none).
func splitLabel(s string) (string, []byte) {
	label, data, ok := strings.Cut(s, string(dataSep))
	if !ok || data == "" {
		return label, nil
	}
	return label, []byte(data)
}

// labelArgFor is the label argument of req's acquisition.
func (d *redisDriver) labelArgFor(req driver.Request) any {
	if len(req.Data) > 0 {
		return labelData(req.Label, req.Data)
	}
	return d.labelArgOf(req.Label)
}

// SetData implements driver.DataSetter: setdata.lua, a compare-and-SET
// that keeps the lock's time to live. With Config.Replicas it returns
// only once WAIT confirms the data on the replicas. Otherwise the error
// matches errNotReplicated, and the new data may or may not survive a
// failover.
func (d *redisDriver) SetData(ctx context.Context, l driver.Lease, data []byte) error {
	if isShared(l) {
		return fmt.Errorf("setdata: %w: shared holds carry no data", driver.ErrPermanent)
	}
	reply, err := d.runReplicated(ctx, d.setData, repliedOne, []string{leaseKey(l)}, l.Owner, data)
	switch {
	case errors.Is(err, errNotReplicated):
		return fmt.Errorf("setdata: %w", err)
	case err != nil:
		return fmt.Errorf("setdata: %w", classify(err))
	case reply == int64(0):
		return fmt.Errorf("setdata: %w", driver.ErrNotHeld)
	case !repliedOne(reply):
		return fmt.Errorf("setdata: unexpected reply %v", reply)
	}
	return nil
}

// SetData implements driver.DataSetter: setdata.lua on every master; the
// data changed when a quorum held the lock.
func (d *redlockDriver) SetData(ctx context.Context, l driver.Lease, data []byte) error {
	ns, errs := fanout(ctx, d, nil, d.detached(), func(ctx context.Context, m Master) (int64, error) {
		return d.setData.Run(ctx, m, []string{lockKey(l.Key)}, l.Owner, data).Int64()
	}, byQuorum(d, isOne), nil)
	return d.result("setdata", d.count(ones(ns), errs))
}

// labelOf is the label part of a lock value for st's label and data.
func labelOf(st driver.Status) string { return labelData(st.Label, st.Data) }
