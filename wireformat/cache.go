package wireformat

import (
	"container/list"
	"sync"
)

// cache keeps compiled schemas by id, the least recently used dropped past its size. A
// schema id names one schema for good in a registry, so an entry is never stale; an
// entry may also hold the error of a schema that does not compile.
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
}

func newCache(size int) *cache {
	return &cache{size: size, order: list.New(), byID: map[int]*list.Element{}}
}

func (c *cache) get(id int) (compiled, error, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byID[id]
	if !ok {
		return nil, nil, false
	}
	c.order.MoveToFront(el)
	e := el.Value.(*cacheEntry)
	return e.s, e.err, true
}

func (c *cache) put(id int, s compiled, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byID[id]; ok {
		el.Value = &cacheEntry{id: id, s: s, err: err}
		c.order.MoveToFront(el)
		return
	}
	c.byID[id] = c.order.PushFront(&cacheEntry{id: id, s: s, err: err})
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
