package dnsfilter

// Exfiltration detector for DNS queries.
//
// A DNS query is a message to whoever runs the authoritative servers of the
// name's registrable domain: an agent that may resolve anything under
// *.example.com can leak data to the owner of example.com by encoding it into
// subdomain labels ("6d7973656372.example.com"). Names allowed by an exact
// rule cannot carry data (the name is fixed by the policy), so the per-name
// checks and the domain quotas below apply only to names allowed through a
// wildcard rule. The per-client rate limit applies to every query.
//
// The detector layers three defences, cheapest first:
//
//  1. A token-bucket rate limit per client address (bounds the bandwidth of
//     any channel and protects the upstream resolver).
//  2. Per-name checks: a cap on the name length, a cap on the label length,
//     and refusal of long labels that look like hex/base32/base64-encoded
//     data (alphabet test plus Shannon entropy).
//  3. Per sandbox and registrable domain, over a sliding window: the number
//     of never-seen names and the bytes carried in their labels. Data has to
//     be new to be worth sending, so an exfiltration channel produces a
//     stream of never-seen names, while legitimate software keeps resolving
//     the same handful of hosts. Over the limit, the domain is refused for
//     the sandbox until the window has passed, and the first refusal asks the
//     caller to write an alert event.
//
// No single check is a proof: a patient attacker can stay under every
// threshold. Together they cap the channel at MaxNewBytes per Window per
// registrable domain per sandbox, which is the number an operator should
// reason about.

import (
	"hash/maphash"
	"math"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/net/publicsuffix"
)

// ExfilConfig holds the detector's thresholds. Zero (or negative) fields take
// the defaults documented on each field.
type ExfilConfig struct {
	// MaxNameLen caps the length of a whole name (without the trailing dot).
	// Default 128. DNS allows 253, and tunnels (iodine, dnscat2, DNSExfiltrator)
	// fill names to near that limit because every byte is bandwidth. The
	// longest names in ordinary traffic are machine-made cloud endpoints such
	// as "internal-<elb-name>-1234567890.us-west-2.elb.amazonaws.com" or
	// "<bucket>.s3.dualstack.eu-central-1.amazonaws.com", which stay well below
	// 100 characters; 128 leaves room for them and halves what a single query
	// can carry.
	MaxNameLen int

	// MaxLabelLen caps the length of each label. Default 52. DNS allows 63,
	// and tunnels use full 63-byte labels. The longest label formats seen in
	// ordinary traffic are AWS load balancer names
	// ("internal-" + 32-character name + "-" + 10 digits = 52), long S3 bucket
	// names and preview-deployment host names; 52 admits the first and the
	// usual forms of the others. Longer random-looking labels are refused as
	// encoded data anyway (see EntropyBits), so this cap mostly bounds the
	// readable-looking encodings that the entropy test cannot see.
	MaxLabelLen int

	// EntropyMinLen is the shortest label that is tested for encoded data.
	// Default 24. Shorter labels are too short for entropy to tell random from
	// readable (a 16-character label has at most 4 bits/char whatever it
	// holds), and short random-looking labels are common and harmless:
	// CloudFront "d1a2b3c4d5e6f7.cloudfront.net", API Gateway ids, Google
	// video "r3---sn-ab5l6nzr" hosts. Data in short labels is still bounded by
	// the domain quotas.
	EntropyMinLen int

	// EntropyBits is the Shannon entropy, in bits per character, at or above
	// which a label of at least EntropyMinLen characters drawn from the
	// base32 or base64 alphabet is refused as encoded data. Default 3.8.
	//
	// Measured on 20,000 labels each: random base32 labels have a median
	// entropy of 3.97 bits/char at 24 characters, 4.20 at 32 and 4.60 at 63
	// (minimum 4.12 at 63 characters), so 3.8 refuses every random base32
	// label of 52 to 63 characters, 99.9% at 40, 99% at 32 and 85% at 24
	// (the domain quotas bound the rest). Readable labels made of
	// concatenated words stay below: "internationalizationservice" 3.35, "avatarsgithubusercontent"
	// 3.64, "productionartifactsbucket" 3.73,
	// "thisisalongbutnormalsubdomainname" 3.74. The lower value 3.5 would
	// refuse most of those.
	//
	// Hex has only 16 symbols (at most 4 bits/char, base32 has 5), so
	// entropy alone misses hex: a label of hex digits only (hyphens allowed,
	// so UUIDs count) is refused at EntropyBits*4/5 bits/char (3.04 by
	// default), which refuses 99% of random 24-character hex labels, 99.9% at
	// 32 and all from 40 characters (the minimum measured is 3.15), while
	// runs of hex-alphabet words ("deadbeefcafe...") stay below it.
	//
	// Lower-cased base64 uses the same alphabet as readable hyphenated labels
	// (letters, digits, hyphen), and those reach 4.4 bits/char
	// ("internal-my-load-balancer-1234567890" 4.35), so for this alphabet the
	// label must also interleave letters and digits the way random data does
	// (at least one letter/digit switch per 10 characters); words and
	// numbers come in runs. This refuses 83% of random 24-character and 98%
	// of random 40- to 63-character lower-cased base64 labels.
	//
	// Known false positives, by design: machine-made hosts whose name holds
	// a random id of 24 or more characters, e.g. AWS Lambda function URLs
	// (32 characters), AppSync endpoints (26), UUID host names, IPFS
	// gateway CIDs. Such a host is one fixed name: allow it with an exact
	// rule, which these checks never judge.
	EntropyBits float64

	// Window is the length of the sliding window of the domain quotas, and
	// how long a domain stays refused for a sandbox once a quota trips.
	// Default 10 minutes: long enough that a slow, patient channel still has
	// to fit MaxNewBytes per window (about 7 bytes per second at the
	// defaults), short enough that a false positive heals on its own within
	// a coffee break.
	Window time.Duration

	// MaxNewNames is the number of never-seen names per sandbox and
	// registrable domain that a window may hold. Default 100: the 101st is
	// refused. Legitimate use of a wildcard rule resolves a handful of hosts
	// over and over (api., uploads., objects., a few CDN shards); even busy
	// package and CI hosts stay in the tens per ten minutes. Every message of
	// an exfiltration channel is a never-seen name.
	MaxNewNames int

	// MaxNewBytes caps the bytes carried in the labels of never-seen names
	// (the part of the name before the registrable domain: 3 bytes for
	// "a.b.example.com") per sandbox, registrable domain and window.
	// Default 4096: the legitimate pattern above (100 names of ~15
	// characters) uses about 1.5 KB, while a tunnel filling its names would
	// reach MaxNewNames * ~110 bytes; 4 KB per 10 minutes is about 2.5 KB of
	// payload after base32 overhead: a token or a key file may still leak
	// slowly, a repository or a database dump cannot.
	MaxNewBytes int

	// QPS is the sustained query rate allowed per client address, and Burst
	// the bucket size. Defaults 50 and 100. A package manager or build tool
	// resolves a few dozen names at start-up, each as an A and an AAAA query
	// at once, so a burst of 100 covers 50 parallel lookups; 50 queries per
	// second sustained is far above what caching clients need, and bounds a
	// tunnel (and the cost of the detector's bookkeeping) per client.
	QPS   float64
	Burst int
}

// Exfil detector defaults; see the ExfilConfig field comments for the
// reasoning.
const (
	exfilDefaultMaxNameLen    = 128
	exfilDefaultMaxLabelLen   = 52
	exfilDefaultEntropyMinLen = 24
	exfilDefaultEntropyBits   = 3.8
	exfilDefaultWindow        = 10 * time.Minute
	exfilDefaultMaxNewNames   = 100
	exfilDefaultMaxNewBytes   = 4096
	exfilDefaultQPS           = 50
	exfilDefaultBurst         = 100

	// exfilMaxClients bounds the rate limiter's memory: at most this many
	// client buckets are kept (about 100 bytes each), least recently used
	// first out. An evicted client gets a fresh, full bucket when it comes
	// back, which is lenient but never refuses wrongly.
	exfilMaxClients = 10000

	// exfilMaxDomainKeys bounds the number of (sandbox, registrable domain)
	// quota states, least recently used first out. Each state holds at most
	// MaxNewNames seen-name entries of 24 bytes (a 64-bit name hash, the time
	// it was first seen and its label bytes), so at the defaults the worst
	// case is about 10,000 * 128 * 24 bytes ≈ 31 MB; typical states hold a
	// few entries. Evicting a state forgets its counts (and a refusal in
	// force), which only an active key could notice, and active keys are the
	// last to be evicted.
	exfilMaxDomainKeys = 10000
)

// Verdict reasons.
const (
	exfilReasonNameTooLong  = "name_too_long"
	exfilReasonLabelTooLong = "label_too_long"
	exfilReasonEncoded      = "encoded_label"
	exfilReasonDomainQuota  = "domain_quota"
	exfilReasonRateLimited  = "rate_limited"
)

// Verdict is the outcome of Check.
type Verdict struct {
	Refuse bool
	// Reason is machine-readable: "name_too_long", "label_too_long",
	// "encoded_label", "domain_quota" or "rate_limited"; empty when allowed.
	Reason string
	// Alert is true when this query tripped a domain quota for the first time
	// in the window; the caller should write an alert event.
	Alert bool
}

// Detector is safe for concurrent use.
type Detector struct {
	cfg     ExfilConfig
	hexBits float64
	window  int64 // nanoseconds
	seed    maphash.Seed

	clientsMu sync.Mutex
	clients   *simplelru.LRU[netip.Addr, *exfilBucket]

	domainsMu sync.Mutex
	domains   *simplelru.LRU[exfilDomainKey, *exfilDomainState]
}

// NewDetector returns a detector with cfg's thresholds, zero fields replaced
// by the defaults.
func NewDetector(cfg ExfilConfig) *Detector {
	if cfg.MaxNameLen <= 0 {
		cfg.MaxNameLen = exfilDefaultMaxNameLen
	}
	if cfg.MaxLabelLen <= 0 {
		cfg.MaxLabelLen = exfilDefaultMaxLabelLen
	}
	if cfg.EntropyMinLen <= 0 {
		cfg.EntropyMinLen = exfilDefaultEntropyMinLen
	}
	if !(cfg.EntropyBits > 0) { // also catches NaN
		cfg.EntropyBits = exfilDefaultEntropyBits
	}
	if cfg.Window <= 0 {
		cfg.Window = exfilDefaultWindow
	}
	if cfg.MaxNewNames <= 0 {
		cfg.MaxNewNames = exfilDefaultMaxNewNames
	}
	if cfg.MaxNewBytes <= 0 {
		cfg.MaxNewBytes = exfilDefaultMaxNewBytes
	}
	if !(cfg.QPS > 0) {
		cfg.QPS = exfilDefaultQPS
	}
	if cfg.Burst <= 0 {
		cfg.Burst = exfilDefaultBurst
	}
	d := &Detector{
		cfg:     cfg,
		hexBits: cfg.EntropyBits * 4 / 5,
		window:  int64(cfg.Window),
		seed:    maphash.MakeSeed(),
	}
	// NewLRU fails only for a non-positive size.
	d.clients, _ = simplelru.NewLRU[netip.Addr, *exfilBucket](exfilMaxClients, nil)
	d.domains, _ = simplelru.NewLRU[exfilDomainKey, *exfilDomainState](exfilMaxDomainKeys, nil)
	return d
}

// Check judges one query from client in sandbox for name (canonical:
// lower-case, no trailing dot). wildcard says whether the name is allowed
// only through a wildcard rule: per-name checks and domain quotas apply only
// then (exact names cannot carry data); the rate limit applies to every
// query. now is the query time (tests pass their own clock).
func (d *Detector) Check(client netip.Addr, sandbox, name string, wildcard bool, now time.Time) Verdict {
	if !d.AllowRate(client, now) {
		return Verdict{Refuse: true, Reason: exfilReasonRateLimited}
	}
	if !wildcard {
		return Verdict{}
	}
	return d.CheckData(sandbox, name, now)
}

// AllowRate charges one query to client's token bucket and reports
// whether it was within the rate (Check's first step; the server calls it
// before deciding, so refused names are rate limited too).
func (d *Detector) AllowRate(client netip.Addr, now time.Time) bool {
	return d.allowRate(client, now.UnixNano())
}

// CheckData applies the per-name checks and the domain quotas to a name
// that can carry data (Check's second step, without the rate limit).
func (d *Detector) CheckData(sandbox, name string, now time.Time) Verdict {
	nowN := now.UnixNano()
	// Defensive canonicalisation; both are free for canonical names.
	name = strings.TrimSuffix(name, ".")
	name = strings.ToLower(name)

	if reason := d.checkName(name); reason != "" {
		return Verdict{Refuse: true, Reason: reason}
	}

	domain := exfilRegistrableDomain(name)
	carried := 0
	if len(name) > len(domain) {
		carried = len(name) - len(domain) - 1 // "a.b" of "a.b.example.com"
	}
	refuse, alert := d.checkQuota(exfilDomainKey{sandbox: sandbox, domain: domain}, maphash.String(d.seed, name), carried, nowN)
	if refuse {
		return Verdict{Refuse: true, Reason: exfilReasonDomainQuota, Alert: alert}
	}
	return Verdict{}
}

// ---- rate limit ----

// exfilBucket is a token bucket; tokens are refilled lazily from the time of
// the last update.
type exfilBucket struct {
	tokens float64
	last   int64 // unix nanoseconds
}

func (d *Detector) allowRate(client netip.Addr, nowN int64) bool {
	burst := float64(d.cfg.Burst)
	d.clientsMu.Lock()
	defer d.clientsMu.Unlock()
	b, ok := d.clients.Get(client)
	if !ok {
		b = &exfilBucket{tokens: burst, last: nowN}
		d.clients.Add(client, b)
	}
	// Time that goes backwards (callers racing with slightly older clocks)
	// refills nothing and does not move last back.
	if elapsed := nowN - b.last; elapsed > 0 {
		b.tokens = math.Min(burst, b.tokens+float64(elapsed)*d.cfg.QPS/float64(time.Second))
		b.last = nowN
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// ---- per-name checks ----

// checkName applies the per-name checks and returns the refusal reason, or
// "" to allow. The most specific reason wins: a label that looks encoded is
// reported as encoded_label even if it is also too long.
func (d *Detector) checkName(name string) string {
	labelTooLong := false
	for rest := name; ; {
		label := rest
		i := strings.IndexByte(rest, '.')
		if i >= 0 {
			label, rest = rest[:i], rest[i+1:]
		}
		if len(label) > d.cfg.MaxLabelLen {
			labelTooLong = true
		}
		if len(label) >= d.cfg.EntropyMinLen && d.encodedLabel(label) {
			return exfilReasonEncoded
		}
		if i < 0 {
			break
		}
	}
	switch {
	case labelTooLong:
		return exfilReasonLabelTooLong
	case len(name) > d.cfg.MaxNameLen:
		return exfilReasonNameTooLong
	}
	return ""
}

// Character classes for the alphabet test.
const (
	exfilHex    = 1 << iota // 0-9 a-f, and hyphen (UUIDs)
	exfilBase32             // a-z 2-7 (RFC 4648 base32, case-folded)
	exfilBase64             // a-z 0-9 - _ + / = (base64 and base64url, case-folded)
	exfilDigit
	exfilLetter
)

var exfilClass = func() (t [256]uint8) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = exfilBase32 | exfilBase64 | exfilLetter
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] |= exfilHex
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = exfilHex | exfilBase64 | exfilDigit
	}
	for c := '2'; c <= '7'; c++ {
		t[c] |= exfilBase32
	}
	for _, c := range "-_+/=" {
		t[c] = exfilBase64
	}
	// A hyphen keeps a label in the hex class, so that UUIDs
	// ("550e8400-e29b-41d4-a716-446655440000") are judged as the 16 bytes
	// of hex they are, consistently, not as base64.
	t['-'] |= exfilHex
	return t
}()

// encodedLabel reports whether label looks like hex, base32 or base64
// encoded data: drawn from one of those alphabets with high entropy.
func (d *Detector) encodedLabel(label string) bool {
	var counts [256]uint32
	alphabets := uint8(exfilHex | exfilBase32 | exfilBase64)
	switches := 0 // letter/digit alternations
	prev := uint8(0)
	for i := 0; i < len(label); i++ {
		c := label[i]
		cl := exfilClass[c]
		alphabets &= cl
		if alphabets == 0 {
			return false
		}
		kind := cl & (exfilDigit | exfilLetter)
		if prev != 0 && kind != 0 && kind != prev {
			switches++
		}
		prev = kind
		counts[c]++
	}
	h := exfilEntropy(&counts, len(label))
	switch {
	case alphabets&exfilHex != 0:
		return h >= d.hexBits
	case alphabets&exfilBase32 != 0:
		return h >= d.cfg.EntropyBits
	default: // base64 alphabet, which readable hyphenated labels share
		return h >= d.cfg.EntropyBits && switches*10 >= len(label)
	}
}

// exfilEntropy returns the Shannon entropy in bits per character of a string
// of n bytes with the given byte counts.
func exfilEntropy(counts *[256]uint32, n int) float64 {
	if n == 0 {
		return 0
	}
	// H = log2(n) - (1/n) * sum(c * log2(c))
	sum := 0.0
	for _, c := range counts {
		if c > 1 {
			sum += float64(c) * math.Log2(float64(c))
		}
	}
	return math.Log2(float64(n)) - sum/float64(n)
}

// exfilRegistrableDomain returns name's registrable domain (eTLD+1), or name
// itself when there is none (a public suffix, a malformed name).
func exfilRegistrableDomain(name string) string {
	// EffectiveTLDPlusOne rejects these with an allocated error; skip the
	// call for them.
	if name == "" || name[0] == '.' || strings.Contains(name, "..") {
		return name
	}
	domain, err := publicsuffix.EffectiveTLDPlusOne(name)
	if err != nil {
		return name
	}
	return domain
}

// ---- domain quotas ----

type exfilDomainKey struct {
	sandbox, domain string
}

// exfilDomainState is the sliding window of one sandbox and registrable
// domain: the names first seen within the last Window, oldest first. The
// list is both the seen-set and the window: an entry leaves it (and its
// name counts as never-seen again) when it is older than Window. It never
// holds more than MaxNewNames entries, because a name over the quota is
// refused instead of added.
type exfilDomainState struct {
	seen         []exfilSeenName // live entries are seen[head:]
	head         int
	bytes        int   // sum of carried over the live entries
	blocked      bool  // a quota tripped; refused until blockedUntil
	blockedUntil int64 // unix nanoseconds
}

type exfilSeenName struct {
	hash    uint64 // maphash of the name; collisions only under-count
	first   int64  // unix nanoseconds of the first query
	carried int    // label bytes counted toward MaxNewBytes
}

func (d *Detector) checkQuota(key exfilDomainKey, hash uint64, carried int, nowN int64) (refuse, alert bool) {
	d.domainsMu.Lock()
	defer d.domainsMu.Unlock()
	s, ok := d.domains.Get(key)
	if !ok {
		s = &exfilDomainState{}
		// Clone so the key does not pin the caller's strings.
		d.domains.Add(exfilDomainKey{sandbox: strings.Clone(key.sandbox), domain: strings.Clone(key.domain)}, s)
	}
	if s.blocked {
		if nowN < s.blockedUntil {
			return true, false
		}
		*s = exfilDomainState{seen: s.seen[:0]}
	}
	// Slide the window: drop entries first seen Window or more ago.
	cutoff := nowN - d.window
	for s.head < len(s.seen) && s.seen[s.head].first <= cutoff {
		s.bytes -= s.seen[s.head].carried
		s.head++
	}
	if s.head == len(s.seen) {
		s.seen, s.head = s.seen[:0], 0
	}
	for i := s.head; i < len(s.seen); i++ {
		if s.seen[i].hash == hash {
			return false, false // seen within the window: carries nothing new
		}
	}
	if len(s.seen)-s.head+1 > d.cfg.MaxNewNames || s.bytes+carried > d.cfg.MaxNewBytes {
		s.blocked, s.blockedUntil = true, nowN+d.window
		return true, true
	}
	if len(s.seen) == cap(s.seen) && s.head > 0 {
		n := copy(s.seen, s.seen[s.head:])
		s.seen, s.head = s.seen[:n], 0
	}
	s.seen = append(s.seen, exfilSeenName{hash: hash, first: nowN, carried: carried})
	s.bytes += carried
	return false, false
}
