package audit

import (
	"fmt"
	"io"
	"os"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// genLog is an endless-looking audit log of n bytes over hosts distinct
// hosts, made as it is read: nothing of it is held in memory.
type genLog struct {
	left, i int64
	hosts   int64
	pending []byte
}

func (g *genLog) Read(p []byte) (int, error) {
	if g.left <= 0 {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && g.left > 0 {
		if len(g.pending) == 0 {
			g.i++
			t := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC).Add(time.Duration(g.i) * time.Millisecond)
			decision := "allow"
			if g.i%10 == 0 {
				decision = "deny"
			}
			g.pending = fmt.Appendf(g.pending[:0], `{"time":%q,"event":"http.request","sandbox":"sb%d","decision":%q,"reason":"allowed","client.address":"10.0.0.2","client.port":40000,"http.request.method":"GET","url.scheme":"https","server.address":"h%d.example.com","server.port":443,"url.path":"/some/path","http.response.status_code":200,"intercepted":true,"bytes_sent":%d,"bytes_received":4096,"duration_ms":12.5}`+"\n",
				t.Format(time.RFC3339Nano), g.i%4, decision, g.i%g.hosts, g.i%100)
		}
		c := copy(p[n:], g.pending)
		if int64(c) > g.left {
			c = int(g.left)
		}
		g.pending = g.pending[c:]
		n += c
		g.left -= int64(c)
	}
	return n, nil
}

// A summary's memory is bounded by the number of distinct hosts, not by
// the size of the log: a generated 1 GiB log (32 MiB under the race
// detector, which makes the gigabyte take minutes; CI runs the gigabyte
// without it) over 1,000 hosts is summarised and suggested from with a
// small, fixed heap. AIRLOCK_AUDIT_TEST_BYTES sets another size.
func TestSummaryMemoryIsBoundedByHostsNotLogSize(t *testing.T) {
	size := int64(1 << 30)
	if raceEnabled {
		size = 32 << 20
	}
	if v := os.Getenv("AIRLOCK_AUDIT_TEST_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("AIRLOCK_AUDIT_TEST_BYTES=%q: %v", v, err)
		}
		size = n
	}
	const hosts = 1000
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	z, sg := NewSummarizer(SummaryOptions{}), NewSuggester(SuggestOptions{})
	start := time.Now()
	st, err := Read(&genLog{left: size, hosts: hosts}, "generated", func(r *Record) { z.Add(r); sg.Add(r) })
	elapsed := time.Since(start)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	s := z.Summary()
	var seen int
	for _, sb := range s.Sandboxes {
		seen += len(sb.Hosts)
	}
	// Host hN is always sandbox sb(N%4), and refused when N%10 == 0; the
	// log's last line is cut at the size.
	if st.Malformed > 1 || len(s.Sandboxes) != 4 || seen != hosts*9/10 {
		t.Fatalf("%d malformed, %d sandboxes, %d host rows; want at most 1 (the cut last line), 4, %d", st.Malformed, len(s.Sandboxes), seen, hosts*9/10)
	}
	const bound = 64 << 20
	t.Logf("%d MiB of log, %d lines in %v (%.0f MB/s); peak heap %.1f MiB", size>>20, st.Lines, elapsed.Round(time.Millisecond),
		float64(size)/elapsed.Seconds()/1e6, float64(peak.Load())/(1<<20))
	if peak.Load() > bound {
		t.Errorf("peak heap %d MiB reading a %d MiB log; want under %d MiB whatever the log's size", peak.Load()>>20, size>>20, bound>>20)
	}
}
