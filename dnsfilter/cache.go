package dnsfilter

// The answer cache. It holds what upstream said, unfiltered: the caller
// must run every answer it serves, cached or fresh, through the rebinding
// filter (blockedAddr), because the address rules may have changed (a
// configuration reload) since the answer was cached, and a filtered
// answer is the caller's reply, not upstream's. Policy decisions and the
// exfiltration detector likewise run before the cache is consulted, so a
// cached answer never lets a query skip them.

import (
	"slices"
	"strconv"
	"strings"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/miekg/dns"
	"golang.org/x/sync/singleflight"
)

// Cache defaults.
const (
	// DefaultCacheSize is the number of questions a cache holds when
	// NewCache is given 0. An entry is a few hundred bytes to a few
	// kilobytes, so 10,000 stays within a few megabytes while covering the
	// working set of any sandbox.
	DefaultCacheSize = 10000

	// DefaultMinTTL is the shortest time an answer is cached when NewCache
	// is given 0. Names served with TTL 0 or 1 (load balancers, CDNs)
	// would otherwise send every query upstream; a sandbox looping on such
	// a name could then use Airlock as a query amplifier against the
	// upstream resolver. Five seconds absorbs such bursts while DNS-based
	// failover still takes effect within seconds.
	DefaultMinTTL = 5 * time.Second

	// DefaultMaxTTL is the longest time an answer is cached when NewCache
	// is given 0, and the largest TTL a cached record is returned with.
	// Zones often publish TTLs of a day or more; capping at an hour bounds
	// how long a renumbered host, or a poisoned or otherwise wrong answer,
	// outlives its fix. It is also the usual ceiling for negative answers
	// (RFC 2308 §5 suggests one to three hours).
	DefaultMaxTTL = time.Hour
)

// cacheKey is a question: lower-cased, fully qualified name, type and class.
type cacheKey struct {
	name          string
	qtype, qclass uint16
}

func keyOf(q dns.Question) cacheKey {
	return cacheKey{strings.ToLower(dns.Fqdn(q.Name)), q.Qtype, q.Qclass}
}

func (k cacheKey) String() string {
	return k.name + " " + strconv.Itoa(int(k.qtype)) + " " + strconv.Itoa(int(k.qclass))
}

// cacheEntry is one cached answer. msg is never modified or handed out:
// callers get copies.
type cacheEntry struct {
	msg     *dns.Msg
	stored  time.Time
	expires time.Time
}

// Cache holds upstream answers by question (lower-cased name, type,
// class). Safe for concurrent use.
//
// Answers are cached for the smallest TTL among their records, or for a
// negative answer (NXDOMAIN, or NOERROR without answers) the negative TTL
// of RFC 2308 (the SOA's MINIMUM or its own TTL, whichever is smaller),
// clamped to [minTTL, maxTTL]. Record TTLs above maxTTL are lowered to it
// when stored, and decrease with the time spent in the cache, never below
// zero. OPT records are not stored. Least recently used entries are
// evicted when the cache is full; expired ones are replaced when their
// question is next resolved, or evicted.
//
// Nothing here filters answers: see the note at the top of this file.
type Cache struct {
	entries        *lru.Cache[cacheKey, *cacheEntry]
	flights        singleflight.Group
	minTTL, maxTTL time.Duration
}

// NewCache returns a cache of at most size entries (0 = DefaultCacheSize,
// 10,000) whose TTLs are clamped to [minTTL, maxTTL] (0 = DefaultMinTTL,
// 5s, and DefaultMaxTTL, 1h, whose comments say why). Negative values
// count as 0; a maxTTL below minTTL is raised to it.
func NewCache(size int, minTTL, maxTTL time.Duration) *Cache {
	if size <= 0 {
		size = DefaultCacheSize
	}
	if minTTL <= 0 {
		minTTL = DefaultMinTTL
	}
	if maxTTL <= 0 {
		maxTTL = DefaultMaxTTL
	}
	maxTTL = max(maxTTL, minTTL)
	entries, err := lru.New[cacheKey, *cacheEntry](size)
	if err != nil {
		panic(err) // only for size <= 0
	}
	return &Cache{entries: entries, minTTL: minTTL, maxTTL: maxTTL}
}

// Get returns a copy of the cached answer for q with every TTL decreased
// by the time it has been cached, or nil when absent or expired. now is
// passed by the caller (tests use a fake clock).
func (c *Cache) Get(q dns.Question, now time.Time) *dns.Msg {
	e, ok := c.entries.Get(keyOf(q))
	if !ok || !now.Before(e.expires) {
		return nil
	}
	return e.answer(now)
}

// answer is a copy of e's message as of now.
func (e *cacheEntry) answer(now time.Time) *dns.Msg {
	m := e.msg.Copy()
	age := now.Sub(e.stored) / time.Second
	if age <= 0 {
		return m
	}
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			h := rr.Header()
			h.Ttl = uint32(max(int64(h.Ttl)-int64(age), 0))
		}
	}
	return m
}

// Resolve returns the cached answer for q, or calls fetch once for all
// concurrent callers of the same question (singleflight), caches a
// successful answer (rcode NOERROR or NXDOMAIN; never SERVFAIL or
// truncated answers) for the smallest TTL among its records (for
// NXDOMAIN/NODATA: the SOA minimum from the authority section, RFC 2308
// §5; no SOA = minTTL), clamped, and returns a copy. Errors from fetch are
// returned and not cached.
//
// fromCache reports an answer taken from the cache; callers that shared
// another caller's fetch get false, as the answer is fresh from upstream.
// A fetched answer that is not cached is returned as fetched (a copy per
// caller); a cached one as stored, without OPT.
func (c *Cache) Resolve(q dns.Question, now time.Time, fetch func() (*dns.Msg, error)) (*dns.Msg, bool, error) {
	k := keyOf(q)
	if e, ok := c.entries.Get(k); ok && now.Before(e.expires) {
		return e.answer(now), true, nil
	}
	type result struct {
		msg       *dns.Msg
		fromCache bool
	}
	v, err, _ := c.flights.Do(k.String(), func() (any, error) {
		// A flight for k may have ended between our Get and Do.
		if e, ok := c.entries.Get(k); ok && now.Before(e.expires) {
			return result{e.answer(now), true}, nil
		}
		m, err := fetch()
		if err != nil {
			return nil, err
		}
		if e := c.entry(m, now); e != nil {
			c.entries.Add(k, e)
			return result{e.msg, false}, nil
		}
		return result{m, false}, nil
	})
	if err != nil {
		return nil, false, err
	}
	r := v.(result)
	if r.msg == nil {
		return nil, r.fromCache, nil
	}
	// r.msg is shared by every caller of the flight (and may be the
	// cached entry itself): each gets its own copy.
	return r.msg.Copy(), r.fromCache, nil
}

// entry is the cache entry for m fetched at now, or nil when m is not to
// be cached.
func (c *Cache) entry(m *dns.Msg, now time.Time) *cacheEntry {
	if m == nil || m.Truncated || (m.Rcode != dns.RcodeSuccess && m.Rcode != dns.RcodeNameError) {
		return nil
	}
	s := m.Copy()
	s.Extra = slices.DeleteFunc(s.Extra, func(rr dns.RR) bool { return rr.Header().Rrtype == dns.TypeOPT })
	if len(s.Extra) == 0 {
		s.Extra = nil
	}
	maxSecs := uint32(min(c.maxTTL/time.Second, 1<<31-1))
	var (
		ttl    uint32
		hasTTL bool
	)
	lower := func(t uint32) {
		if !hasTTL || t < ttl {
			ttl, hasTTL = t, true
		}
	}
	negative := s.Rcode == dns.RcodeNameError || len(s.Answer) == 0
	if negative {
		// RFC 2308 §5: the negative TTL is the SOA's MINIMUM, or its
		// own TTL when smaller (§3). A CNAME chain leading to the
		// missing name counts too.
		for _, rr := range s.Ns {
			if soa, ok := rr.(*dns.SOA); ok {
				lower(min(soa.Hdr.Ttl, soa.Minttl))
			}
		}
		if hasTTL {
			for _, rr := range s.Answer {
				lower(rr.Header().Ttl)
			}
		}
	} else {
		for _, sec := range [][]dns.RR{s.Answer, s.Ns, s.Extra} {
			for _, rr := range sec {
				lower(rr.Header().Ttl)
			}
		}
	}
	for _, sec := range [][]dns.RR{s.Answer, s.Ns, s.Extra} {
		for _, rr := range sec {
			h := rr.Header()
			h.Ttl = min(h.Ttl, maxSecs)
		}
	}
	life := c.minTTL // also when no TTL was found (no SOA)
	if hasTTL {
		life = min(max(time.Duration(ttl)*time.Second, c.minTTL), c.maxTTL)
	}
	return &cacheEntry{msg: s, stored: now, expires: now.Add(life)}
}
