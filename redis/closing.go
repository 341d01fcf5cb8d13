package redis

import (
	"context"

	goredis "github.com/redis/go-redis/v9"
)

// The engine gives a caller whose ctx can never end (context.Background())
// a call ctx that ends only when the Locker closes (driver.Config.Closing).
// An owned client runs those calls on a pool of their own, which it closes
// as the Locker starts to close: that cuts every such call at once, with
// no slot and no context.AfterFunc per call. An attempt cut so is buried
// as one cut on a slot is (see cut.go): it carries its tombstone.

// closingPool is the pool of an owned client for the calls whose ctx ends
// only when its Locker closes.
type closingPool struct {
	done   <-chan struct{} // the Done of the Locker's Closing ctx
	client *goredis.Client
	// stop stops the close that Closing's end starts (context.AfterFunc's).
	stop func() bool
	// closed is closed once client is closed.
	closed chan struct{}
}

// close closes the pool's client: the calls it runs fail at once.
func (p *closingPool) close() {
	_ = p.client.Close()
	close(p.closed)
}

// closeWith makes the pool of the calls whose ctx's Done is closing's, and
// closes it when closing ends. Only the first Locker on c gets one; the
// calls of another run on slots.
func (c *ownedClient) closeWith(closing context.Context) {
	if closing == nil {
		return
	}
	o := c.opt
	// Pipelines use the pool's connections, which its close reaches.
	o.PipelinePoolSize = -1
	// Idle connections are dialled when a call needs one, not ahead.
	o.MinIdleConns = 0
	p := &closingPool{done: closing.Done(), closed: make(chan struct{})}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.closing.Load() != nil {
		return
	}
	p.client = goredis.NewClient(&o)
	p.stop = context.AfterFunc(closing, p.close)
	c.closing.Store(p)
}

// pool returns the client that runs a call with ctx: c's own when ctx
// never ends or is marked by uncut, the closing pool when ctx ends only
// when the Locker closes, nil when the call takes a slot.
func (c *ownedClient) pool(ctx context.Context) *goredis.Client {
	done := ctx.Done()
	if done == nil {
		return c.Client
	}
	if p := c.closing.Load(); p != nil && p.done == done {
		return p.client
	}
	if ctx.Value(uncutKey{}) != nil {
		return c.Client
	}
	return nil
}

// closeClosing closes the closing pool, or waits until Closing's end has
// closed it.
func (c *ownedClient) closeClosing() {
	p := c.closing.Load()
	if p == nil {
		return
	}
	if p.stop() {
		p.close()
		return
	}
	<-p.closed
}
