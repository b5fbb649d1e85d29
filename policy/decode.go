package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// ConfigError is one problem in a configuration file: where it is, which key,
// and what was expected. Load and Parse return every ConfigError they find,
// joined with errors.Join, in file order.
type ConfigError struct {
	File string // file name as given to Parse, or "<embedded default>"
	Line int    // 1-based; 0 when the problem has no single place
	Col  int    // 1-based
	Path string // key path, e.g. "policies.default.allow[2].host"
	Msg  string // what was wrong and what was expected
}

// Error formats the problem as "file:line:col: key.path: message".
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", e.Line, e.Col)
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// position is the place of a YAML node; structs that embed a field of this
// type named Pos get it filled with the place of their mapping.
type position struct{ Line, Col int }

// maxConfigErrors bounds how many errors one file reports.
const maxConfigErrors = 50

// decoder walks a yaml.Node tree into Go values by reflection, strictly:
// unknown keys, duplicate keys, wrong YAML types, anchors and aliases are
// errors that name the place and the key path. yaml.v3's own decoding names
// lines but not columns or key paths, and cannot be made to reject
// duplicate keys in structs, hence this walker.
type decoder struct {
	file string
	errs []error
}

// nodeDecoder is implemented by config types that parse and validate their
// own YAML node (host patterns, CIDRs, ports, durations...).
type nodeDecoder interface {
	decodeNode(d *decoder, n *yaml.Node, path string)
}

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	if len(d.errs) >= maxConfigErrors {
		return
	}
	e := &ConfigError{File: d.file, Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Col = n.Line, n.Column
	}
	d.errs = append(d.errs, e)
}

var (
	nodeDecoderType = reflect.TypeFor[nodeDecoder]()
	positionType    = reflect.TypeFor[position]()
	durationType    = reflect.TypeFor[time.Duration]()
)

// decode fills v (a non-nil pointer) from n. The tree has no anchors or
// aliases: decodeYAML rejects them first.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if v.CanAddr() && v.Addr().Type().Implements(nodeDecoderType) {
		if isNull(n) {
			return
		}
		v.Addr().Interface().(nodeDecoder).decodeNode(d, n, path)
		return
	}
	if isNull(n) {
		if v.Kind() == reflect.Slice {
			// "ports:" with nothing after it reads as "any" to some and
			// "none" to others: make the author say which.
			d.errorf(n, path, "empty value; give a list, or remove the key for the default")
		}
		return // key present with no value: keep the zero value
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(n, v.Elem(), path)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Map:
		d.decodeMap(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.errorf(n, path, "expected a list, got %s", describe(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			ip := fmt.Sprintf("%s[%d]", path, i)
			if isNull(c) {
				// A zero port, method or path would quietly match nothing,
				// which turns a deny rule off.
				d.errorf(c, ip, "empty list item; remove it or give a value")
				continue
			}
			d.decode(c, s.Index(i), ip)
		}
		v.Set(s)
	case reflect.String:
		if !isScalar(n, "!!str") {
			d.errorf(n, path, "expected a string, got %s; quote it if it is meant as text", describe(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Bool:
		b, err := strconv.ParseBool(n.Value)
		if !isScalar(n, "!!bool") || err != nil {
			d.errorf(n, path, "expected true or false, got %s", describe(n))
			return
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64:
		if v.Type() == durationType {
			d.decodeDuration(n, v, path)
			return
		}
		i, err := strconv.ParseInt(n.Value, 0, 64)
		if !isScalar(n, "!!int") || err != nil {
			d.errorf(n, path, "expected a whole number, got %s", describe(n))
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		f, err := strconv.ParseFloat(n.Value, 64)
		if !(isScalar(n, "!!float") || isScalar(n, "!!int")) || err != nil || f < 0 {
			d.errorf(n, path, "expected a number, got %s", describe(n))
			return
		}
		v.SetFloat(f)
	default:
		// A programming error in the schema, not in the file.
		panic("policy: cannot decode YAML into " + v.Type().String())
	}
}

func (d *decoder) decodeDuration(n *yaml.Node, v reflect.Value, path string) {
	dur, err := time.ParseDuration(n.Value)
	if isScalar(n, "!!int") {
		d.errorf(n, path, "expected a duration with a unit; did you mean %ss?", n.Value)
		return
	}
	if !isScalar(n, "!!str") || err != nil || dur < 0 {
		d.errorf(n, path, "expected a duration such as 30s, 5m or 1h30m, got %s", describe(n))
		return
	}
	v.SetInt(int64(dur))
}

// decodeStruct maps YAML keys to fields by their `yaml` tag.
func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "expected a mapping of keys, got %s", describe(n))
		return
	}
	t := v.Type()
	fields := make(map[string]int, t.NumField())
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Type == positionType && f.Name == "Pos" {
			v.Field(i).Set(reflect.ValueOf(position{n.Line, n.Column}))
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "" || tag == "-" || !f.IsExported() {
			continue
		}
		fields[tag] = i
		keys = append(keys, tag)
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		kp := join(path, k.Value)
		if !isScalar(k, "!!str") {
			d.errorf(k, path, "expected a key name, got %s", describe(k))
			continue
		}
		if seen[k.Value] {
			d.errorf(k, kp, "key is given twice; keep one")
			continue
		}
		seen[k.Value] = true
		fi, ok := fields[k.Value]
		if !ok {
			d.errorf(k, kp, "unknown key; expected one of: %s", strings.Join(keys, ", "))
			continue
		}
		d.decode(val, v.Field(fi), kp)
	}
}

// decodeMap decodes a mapping with string keys; key order is kept by the
// caller where it matters (map values carry their own positions).
func (d *decoder) decodeMap(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "expected a mapping, got %s", describe(n))
		return
	}
	if v.Type().Key().Kind() != reflect.String {
		panic("policy: map keys must be strings")
	}
	if v.IsNil() {
		v.Set(reflect.MakeMapWithSize(v.Type(), len(n.Content)/2))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if !isScalar(k, "!!str") || k.Value == "" {
			d.errorf(k, path, "expected a name as key, got %s", describe(k))
			continue
		}
		kp := join(path, k.Value)
		key := reflect.ValueOf(k.Value).Convert(v.Type().Key())
		if v.MapIndex(key).IsValid() {
			d.errorf(k, kp, "key is given twice; keep one")
			continue
		}
		elem := reflect.New(v.Type().Elem()).Elem()
		d.decode(val, elem, kp)
		v.SetMapIndex(key, elem)
	}
}

// decodeYAML parses data (one YAML document) into v, a pointer to a struct.
func (d *decoder) decodeYAML(data []byte, v any) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if !errors.Is(err, io.EOF) { // io.EOF: an empty file
			d.syntaxError(err)
		}
		return
	}
	// yaml.v3 reads one document at a time; a second one must not be
	// ignored silently.
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		d.syntaxError(err)
		return
	default:
		d.errorf(&next, "", "expected one YAML document; remove the second one (after ---) or merge it into the first")
		return
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		d.errorf(&doc, "", "expected one YAML document")
		return
	}
	d.rejectAnchors(doc.Content[0], "")
	if len(d.errs) > 0 {
		return
	}
	d.decode(doc.Content[0], reflect.ValueOf(v).Elem(), "")
}

// rejectAnchors reports every anchor and alias under n, keys included: an
// alias shares one value between places (and its Value is the anchor's
// name, not the text at its place), and a merge key hides where a value
// came from.
func (d *decoder) rejectAnchors(n *yaml.Node, path string) {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		d.errorf(n, path, "YAML anchors and aliases are not supported; write the value out")
		return
	}
	switch n.Kind {
	case yaml.SequenceNode:
		for i, c := range n.Content {
			d.rejectAnchors(c, fmt.Sprintf("%s[%d]", path, i))
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			kp := join(path, n.Content[i].Value)
			d.rejectAnchors(n.Content[i], kp)
			d.rejectAnchors(n.Content[i+1], kp)
		}
	}
}

// yamlParserProblems are the messages of yaml.v3's parser (parserc.go), as
// opposed to its scanner. yaml.v3 reports the line of a parser error 0-based
// ("line 2" is the third line) and a scanner error 1-based, and leaves the
// line out when its 0-based value is 0.
var yamlParserProblems = []string{
	"did not find expected <stream-start>",
	"did not find expected <document start>",
	"did not find expected node content",
	"did not find expected key",
	"did not find expected '-' indicator",
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
	"found duplicate %YAML directive",
	"found duplicate %TAG directive",
	"found incompatible YAML document",
	"found undefined tag handle",
}

// syntaxError records a yaml.v3 syntax error, which reads "yaml: line N:
// problem" or "yaml: problem", with a 1-based line. yaml.v3 gives no column.
func (d *decoder) syntaxError(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, tail, ok := strings.Cut(rest, ": "); ok {
			if l, err := strconv.Atoi(num); err == nil {
				line, msg = l, tail
			}
		}
	}
	if line == 0 || slices.Contains(yamlParserProblems, msg) {
		line++
	}
	d.errs = append(d.errs, &ConfigError{File: d.file, Line: line, Col: 1,
		Msg: "YAML syntax: " + msg + ` (values that start with "*", "&", "!" or "[", or contain ": " or " #", need quotes: host: "*.example.com")`})
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func isScalar(n *yaml.Node, tag string) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == tag
}

// describe names a node's YAML type and (short) value for error messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	v := n.Value
	if len(v) > 40 {
		v = v[:40] + "..."
	}
	kind := strings.TrimPrefix(n.ShortTag(), "!!")
	if slices.Contains([]string{"str", "int", "float", "bool", "null"}, kind) {
		return fmt.Sprintf("%s %q", kind, v)
	}
	return fmt.Sprintf("%q", v)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
