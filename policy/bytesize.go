package policy

import (
	"math"
	"strconv"

	"github.com/dustin/go-humanize"
	"gopkg.in/yaml.v3"
)

// ByteSize is a number of bytes. In YAML it is a whole number of bytes or
// a string with a unit, read by go-humanize's ParseBytes: "64KiB",
// "10 MB", "1.5GiB". KB, MB, GB and TB are powers of 1000; KiB, MiB, GiB
// and TiB powers of 1024.
type ByteSize int64

// String formats b with a binary unit ("64 KiB").
func (b ByteSize) String() string { return humanize.IBytes(uint64(b)) }

func (b *ByteSize) decodeNode(d *decoder, n *yaml.Node, path string) {
	if isScalar(n, "!!int") {
		i, err := strconv.ParseInt(n.Value, 0, 64)
		if err != nil || i < 0 {
			d.errorf(n, path, "expected a size in bytes, got %s", describe(n))
			return
		}
		*b = ByteSize(i)
		return
	}
	if !isScalar(n, "!!str") {
		d.errorf(n, path, "expected a size such as 65536, 64KiB or 10MB, got %s", describe(n))
		return
	}
	u, err := humanize.ParseBytes(n.Value)
	if err != nil || u > math.MaxInt64 {
		d.errorf(n, path, "expected a size such as 65536, 64KiB or 10MB, got %s", describe(n))
		return
	}
	*b = ByteSize(u)
}
