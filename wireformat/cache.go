package wireformat

import (
	"container/list"
	"sync"
	"time"
)

// cache keeps compiled schemas by id, the least recently used dropped past its size. A
// schema id names one schema for good in a registry, so an entry is never stale; an
// entry may also hold the error of a schema that does not compile, kept as long, or the
// registry's answer that it does not know the id, kept until its expiry.
type cache struct {
	mu    sync.Mutex
	size  int
	order *list.List // of *cacheEntry, most recently used first
	byID  map[int]*list.Element
}

type cacheEntry struct {
	id  int
	s   compiled
	err error
	// expires, when set, is when the entry stops answering.
	expires time.Time
}

func newCache(size int) *cache {
	return &cache{size: size, order: list.New(), byID: map[int]*list.Element{}}
}

func (c *cache) get(id int, now time.Time) (compiled, error, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byID[id]
	if !ok {
		return nil, nil, false
	}
	e := el.Value.(*cacheEntry)
	if !e.expires.IsZero() && !now.Before(e.expires) {
		c.order.Remove(el)
		delete(c.byID, id)
		return nil, nil, false
	}
	c.order.MoveToFront(el)
	return e.s, e.err, true
}

// put keeps id's schema or error; a non-zero expires ends the entry then.
func (c *cache) put(id int, s compiled, err error, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := &cacheEntry{id: id, s: s, err: err, expires: expires}
	if el, ok := c.byID[id]; ok {
		el.Value = e
		c.order.MoveToFront(el)
		return
	}
	c.byID[id] = c.order.PushFront(e)
	for c.order.Len() > c.size {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byID, last.Value.(*cacheEntry).id)
	}
}

func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
