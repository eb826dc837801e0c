package aggregator

import "sync"

// cacheKind names what a cached document decodes to.
type cacheKind int

const (
	cacheNames    cacheKind = iota // enabled_events, required_events: []string
	cacheExpected                  // expected_events: []Expected
	cacheMapping                   // output_mapping: []mappedOutput
	cacheKinds
)

// decodedCacheMax bounds each kind's entries; a full kind starts afresh.
const decodedCacheMax = 512

// decodedCache keeps the decoded forms of the parts of a wait row that are written once,
// at registration, from its node's definition — its events, what they expect, its
// output mapping — by their text: every wait of one node holds the same text (event
// deadlines aside), so deciding a batch of events decodes each part once instead of
// once a wait. What it hands out is shared: it must only be read.
var decodedCache = newDecodeCache()

type decodeCache struct {
	mu    sync.RWMutex
	kinds [cacheKinds]map[string]any
}

func newDecodeCache() *decodeCache {
	c := &decodeCache{}
	for i := range c.kinds {
		c.kinds[i] = map[string]any{}
	}
	return c
}

// get returns raw's decoded form of kind, decoding it with decode on a miss. Errors are
// not kept.
func (c *decodeCache) get(kind cacheKind, raw []byte, decode func() (any, error)) (any, error) {
	c.mu.RLock()
	v, ok := c.kinds[kind][string(raw)]
	c.mu.RUnlock()
	if ok {
		return v, nil
	}
	v, err := decode()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.kinds[kind]) >= decodedCacheMax {
		c.kinds[kind] = map[string]any{}
	}
	c.kinds[kind][string(raw)] = v
	c.mu.Unlock()
	return v, nil
}
