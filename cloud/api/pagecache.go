package api

import (
	"strconv"
	"strings"
	"sync"

	"github.com/fleet/fleet/cloud"
)

// Bounds of a page cache; past either, the cache starts over empty.
const (
	pageCacheEntries = 4096
	pageCacheBytes   = 32 << 20
)

// pageCache keeps the rendered 200 bodies of one hot list endpoint (GET
// /devices or GET /alerts), keyed by organization and the parsed filter, for
// one data version of the store (Config.Versioner): a page is served from
// it only while nothing at all was committed since it was rendered. Bodies are immutable
// once stored. The organization is part of the key, so one organization's
// page can never answer another's request.
type pageCache[F comparable] struct {
	mu      sync.Mutex
	version uint64
	pages   map[pageKey[F]]page
	bytes   int
}

// page is a stored 200 body with its Content-Length header value, built
// once with it (the header map takes the slice as it is).
type page struct {
	body   []byte
	length []string
}

type pageKey[F comparable] struct {
	org    string
	filter F
}

// get returns the page stored for org and f at version; its body is nil
// when there is none.
func (c *pageCache[F]) get(version uint64, org string, f F) page {
	c.mu.Lock()
	defer c.mu.Unlock()
	if version != c.version {
		if version > c.version {
			c.reset(version)
		}
		return page{}
	}
	return c.pages[pageKey[F]{org, f}]
}

// put stores a copy of body for org and f, rendered from what the store held
// at version (read before the page was).
func (c *pageCache[F]) put(version uint64, org string, f F, body []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if version < c.version {
		return // rendered from an older state than the cache already knows
	}
	if version > c.version || len(c.pages) >= pageCacheEntries || c.bytes+len(body) > pageCacheBytes {
		c.reset(version)
	}
	if len(body) > pageCacheBytes {
		return
	}
	b := make([]byte, len(body))
	copy(b, body)
	k := pageKey[F]{org, f}
	if old, ok := c.pages[k]; ok {
		c.bytes -= len(old.body)
	}
	c.pages[k] = page{body: b, length: []string{strconv.Itoa(len(b))}}
	c.bytes += len(b)
}

func (c *pageCache[F]) reset(version uint64) {
	c.version = version
	c.pages = make(map[pageKey[F]]page)
	c.bytes = 0
}

// listPages are the two page caches of the server.
type listPages struct {
	devices pageCache[cloud.DeviceFilter]
	alerts  pageCache[cloud.AlertFilter]
}

// Bounds of a query cache: queries longer than maxCachedQuery bytes are
// parsed every time; past queryCacheEntries, the cache starts over empty.
const (
	queryCacheEntries = 1024
	maxCachedQuery    = 256
)

// queryCache remembers the filter a hot list endpoint parsed from a raw
// query string: clients ask the same few queries again and again, and a map
// lookup replaces url.ParseQuery, the checks of each parameter and their
// allocations. Only queries that parsed without a problem are kept (a
// problem is answered by parsing again, with its message), and the filter
// depends on nothing but the query, so a hit answers what a parse would.
type queryCache[F any] struct {
	mu sync.RWMutex
	m  map[string]F
}

// get returns the filter parsed from raw before, if any.
func (c *queryCache[F]) get(raw string) (F, bool) {
	c.mu.RLock()
	f, ok := c.m[raw]
	c.mu.RUnlock()
	return f, ok
}

// put keeps f, parsed without a problem from raw.
func (c *queryCache[F]) put(raw string, f F) {
	if len(raw) > maxCachedQuery {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= queryCacheEntries {
		c.m = make(map[string]F)
	}
	c.m[strings.Clone(raw)] = f
}

// listQueries are the two query caches of the server.
type listQueries struct {
	devices queryCache[cloud.DeviceFilter]
	alerts  queryCache[cloud.AlertFilter]
}
