package audit

import (
	"bytes"
	"compress/gzip"
	"os"
	"strings"
	"testing"
)

func readAll(t *testing.T, data []byte) ([]Record, ReadStats) {
	t.Helper()
	var recs []Record
	st, err := Read(bytes.NewReader(data), "log", func(r *Record) { recs = append(recs, *r) })
	if err != nil {
		t.Fatal(err)
	}
	return recs, st
}

func TestReadCountsMalformedLinesAndGoesOn(t *testing.T) {
	good := `{"time":"2026-11-29T21:59:47Z","event":"tunnel","sandbox":"a","decision":"allow","server.address":"x.test","server.port":443}`
	long := `{"time":"2026-11-29T21:59:47Z","event":"tunnel","pad":"` + strings.Repeat("p", MaxLineBytes) + `"}`
	log := strings.Join([]string{
		good,
		"",
		"plain text",
		`{"time":"2026-11-29T21:59:47Z","event":"tunnel","bytes_sent":"lots"}`,
		`{"time":"2026-11-29T21:59:47Z","decision":"allow"}`,
		`{"event":"tunnel"}`,
		`{"time":"2026-11-29T21:59:47Z","event":"something.new"}`,
		`{"time":"2026-11-29T21:59:47Z","event":"tunnel"`,
		long,
		`{"time":"2026-11-29T21:59:47Z","event":"tunnel","server.address":"` + strings.Repeat("h", 300) + `"}`,
		good + "\r",
		good, // no final newline
	}, "\n")
	recs, st := readAll(t, []byte(log))
	if len(recs) != 3 || recs[0].Host != "x.test" || recs[0].Port != 443 || recs[0].Event != KindTunnel {
		t.Fatalf("read %d records (%+v); want the 3 good ones", len(recs), recs)
	}
	if st.Lines != 11 || st.Malformed != 8 {
		t.Errorf("stats %+v; want 11 lines, 8 malformed", st)
	}
	want := []string{
		"log:3: not a JSON object",
		`log:4: field "bytes_sent" has the wrong type`,
		`log:5: no "event" field`,
		`log:6: no "time" field`,
		`log:7: unknown event "something.new"`,
	}
	if strings.Join(st.Examples, "\n") != strings.Join(want, "\n") {
		t.Errorf("examples:\n%s\nwant:\n%s", strings.Join(st.Examples, "\n"), strings.Join(want, "\n"))
	}
}

func TestReadTakesGzipAsItIs(t *testing.T) {
	plain, err := os.ReadFile("testdata/recorded.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	// Two gzip members back to back, as `cat a.gz b.gz` makes.
	var gz bytes.Buffer
	half := bytes.Index(plain, []byte("\n{\"time\":\"2026-11-29T21:59:53Z\"")) + 1
	for _, part := range [][]byte{plain[:half], plain[half:]} {
		zw := gzip.NewWriter(&gz)
		zw.Write(part)
		zw.Close()
	}
	want, wst := readAll(t, plain)
	got, gst := readAll(t, gz.Bytes())
	if len(got) != len(want) || gst.Lines != wst.Lines || gst.Malformed != wst.Malformed {
		t.Errorf("gzip: %d records, %+v; plain: %d records, %+v", len(got), gst, len(want), wst)
	}
	if _, err := Read(bytes.NewReader(gz.Bytes()[:gz.Len()/2]), "cut.gz", func(*Record) {}); err == nil {
		t.Error("a truncated gzip file read without an error")
	}
}

func FuzzRead(f *testing.F) {
	if data, err := os.ReadFile("testdata/recorded.jsonl"); err == nil {
		f.Add(data)
	}
	f.Add([]byte("\x1f\x8b"))
	f.Add([]byte(`{"time":"2026-11-29T21:59:47Z","event":"dns.query","dns.question.name":"a"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		z, s := NewSummarizer(SummaryOptions{}), NewSuggester(SuggestOptions{})
		st, _ := Read(bytes.NewReader(data), "fuzz", func(r *Record) { z.Add(r); s.Add(r) })
		if st.Malformed > st.Lines {
			t.Fatalf("%d malformed of %d lines", st.Malformed, st.Lines)
		}
		z.Stats(st)
		var out bytes.Buffer
		for _, f := range []string{FormatTable, FormatJSON, FormatMarkdown} {
			if err := WriteSummary(&out, z.Summary(), f); err != nil {
				t.Fatal(err)
			}
		}
		out.Reset()
		if err := s.WriteYAML(&out); err != nil {
			t.Fatal(err)
		}
		if _, err := policyParse(out.Bytes()); err != nil {
			t.Fatalf("the suggestion does not parse: %v\n%s", err, out.Bytes())
		}
	})
}
