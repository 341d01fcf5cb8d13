package zookeeper

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/golocker/locker/driver"
)

// dataSep ends the owner label in a lock node's data when the lock carries
// data (locker.WithData), which follows it. A label never contains it:
// locker.WithOwnerLabel refuses a NUL byte.
const dataSep = 0

// nodeData is a lock node's data: the owner label, then dataSep and the
// data when there is data.
func nodeData(label string, data []byte) []byte {
	if len(data) == 0 {
		return []byte(label)
	}
	b := make([]byte, 0, len(label)+1+len(data))
	return append(append(append(b, label...), dataSep), data...)
}

// labelAndData takes a lock node's data apart: the label and the data
// (nil: none).
func labelAndData(b []byte) (string, []byte) {
	label, data, ok := bytes.Cut(b, []byte{dataSep})
	if !ok || len(data) == 0 {
		return string(label), nil
	}
	return string(label), bytes.Clone(data)
}

// SetData implements driver.DataSetter: the holder's node gets new data
// (its path is unique, so this never touches another owner's node). It
// needs WRITE on the lock node, which the default ACL of a connection
// without credentials does not grant: it then returns an error matching
// errors.ErrUnsupported.
func (d *zkDriver) SetData(ctx context.Context, l driver.Lease, data []byte) error {
	h, ok := l.State.(*hold)
	if !ok {
		return fmt.Errorf("setdata: %w: shared holds carry no data", driver.ErrPermanent)
	}
	if !h.held() {
		return driver.ErrNotHeld
	}
	err := call0(ctx, d, func() error {
		_, err := d.conn.Set(h.path, nodeData(h.label, data), -1)
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("%w: %s: %w", driver.ErrNotHeld, h.path, err)
	}
	if errors.Is(err, zk.ErrNoAuth) {
		// The default ACL of a connection without credentials makes lock
		// nodes READ-only, the holder's own included.
		return fmt.Errorf("setdata %s: %w: the lock node's ACL does not grant this connection WRITE (without credentials lock nodes are READ-only: set Config.Digest, or a Config.ACL granting WRITE on lock nodes): %w",
			h.path, errors.ErrUnsupported, err)
	}
	if err != nil {
		return fmt.Errorf("setdata %s: %w", h.path, classify(denied(err, h.path, "WRITE")))
	}
	return nil
}
