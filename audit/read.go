package audit

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Record is one audit line read back: the fields that audit summaries
// and policy suggestions use. Fields a line lacks are zero.
type Record struct {
	Time          time.Time `json:"time"`
	Event         string    `json:"event"` // KindRequest, KindTunnel or KindDNS
	Sandbox       string    `json:"sandbox"`
	Decision      string    `json:"decision"` // "allow", "deny" or "would_deny"
	Reason        string    `json:"reason"`
	Host          string    `json:"server.address"`
	Port          uint16    `json:"server.port"`
	Status        int       `json:"http.response.status_code"`
	BytesSent     int64     `json:"bytes_sent"`
	BytesReceived int64     `json:"bytes_received"`
	Credential    string    `json:"credential"`
	Alert         string    `json:"alert"`
	Limit         string    `json:"limit"`
	Intercepted   bool      `json:"intercepted"`
	QName         string    `json:"dns.question.name"`
	QType         string    `json:"dns.question.type"`
}

// MaxLineBytes is the longest audit line Read accepts; Airlock writes
// lines of a few hundred bytes.
const MaxLineBytes = 1 << 20

// ReadStats counts what Read saw.
type ReadStats struct {
	Lines     int64 // lines read, blank ones excluded
	Malformed int64 // lines that are not Airlock audit events
	// Examples says where the first malformed lines are and what is wrong
	// with them ("audit.log:17: not JSON"), at most maxExamples.
	Examples []string
}

const maxExamples = 5

func (s *ReadStats) malformed(name string, line int64, why string) {
	s.Malformed++
	if len(s.Examples) < maxExamples {
		s.Examples = append(s.Examples, fmt.Sprintf("%s:%d: %s", name, line, why))
	}
}

// Read reads audit lines from r, decompressing it first if it is gzip
// (RFC 1952; concatenated members too), and calls fn with each event. name
// labels r in ReadStats.Examples. A line that is not JSON, not an object,
// longer than MaxLineBytes or not an Airlock event (no known "event" or
// no "time") is counted in stats and skipped, never fatal. The error is
// a read or decompression failure; the stats up to it are still valid.
// The Record passed to fn is reused for the next line.
func Read(r io.Reader, name string, fn func(*Record)) (ReadStats, error) {
	var stats ReadStats
	br := bufio.NewReaderSize(r, 64<<10)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return stats, fmt.Errorf("%s: %w", name, err)
		}
		defer zr.Close()
		br = bufio.NewReaderSize(zr, 64<<10)
	}
	var (
		rec     Record
		long    []byte // a line longer than the buffer, being assembled
		tooLong bool
		n       int64
	)
	for {
		chunk, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if !tooLong {
				if len(long)+len(chunk) > MaxLineBytes {
					tooLong, long = true, long[:0]
				} else {
					long = append(long, chunk...)
				}
			}
			continue
		}
		line := chunk
		if len(long) > 0 {
			tooLong = tooLong || len(long)+len(chunk) > MaxLineBytes
			line = append(long, chunk...)
			long = long[:0]
		}
		if len(line) > 0 {
			n++
			if tooLong {
				stats.Lines++
				stats.malformed(name, n, fmt.Sprintf("longer than %d bytes", MaxLineBytes))
			} else if line = bytes.TrimSpace(line); len(line) > 0 {
				stats.Lines++
				rec = Record{}
				switch why := decode(line, &rec); why {
				case "":
					fn(&rec)
				default:
					stats.malformed(name, n, why)
				}
			}
		}
		tooLong = false
		if err == io.EOF {
			return stats, nil
		}
		if err != nil {
			return stats, fmt.Errorf("%s: line %d: %w", name, n+1, err)
		}
	}
}

// decode fills rec from one line and says what is wrong with it, or "".
func decode(line []byte, rec *Record) string {
	if line[0] != '{' {
		return "not a JSON object"
	}
	if err := json.Unmarshal(line, rec); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Sprintf("field %q has the wrong type", te.Field)
		}
		return "not JSON"
	}
	switch rec.Event {
	case KindRequest, KindTunnel, KindDNS:
	case "":
		return `no "event" field`
	default:
		return fmt.Sprintf("unknown event %q", rec.Event)
	}
	if rec.Time.IsZero() {
		return `no "time" field`
	}
	// Airlock never writes longer ones; a log that does is not Airlock's,
	// and must not make a summary hold megabyte-long keys.
	for _, f := range []struct {
		name, v string
		max     int
	}{
		{"server.address", rec.Host, 255}, {"dns.question.name", rec.QName, 255}, {"sandbox", rec.Sandbox, 64},
		{"reason", rec.Reason, 64}, {"credential", rec.Credential, 64}, {"alert", rec.Alert, 64}, {"limit", rec.Limit, 64},
	} {
		if len(f.v) > f.max {
			return fmt.Sprintf("%q is longer than %d bytes", f.name, f.max)
		}
	}
	return ""
}
