package proxy

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/airlockhq/airlock/policy"
)

// The Control hook is the last check before connect(2): it must refuse
// any address the rules block and the proxy's own listeners, whatever
// the resolver said.
func TestDialControlChecksTheConnectedAddress(t *testing.T) {
	d := newDialer(nil, DialTimeout)
	d.setSelf([]netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:3128"), netip.MustParseAddrPort("0.0.0.0:9090")})
	rules := &policy.AddressRules{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	control := d.control(rules)
	var blocked *policy.BlockedAddrError
	cases := []struct {
		addr string
		want func(error) bool
	}{
		{"93.184.215.14:443", func(err error) bool { return err == nil }},
		{"127.0.0.2:80", func(err error) bool { return err == nil }}, // allowed by the rules
		{"169.254.169.254:80", func(err error) bool { return errors.As(err, &blocked) }},
		{"[::ffff:169.254.169.254]:80", func(err error) bool { return errors.As(err, &blocked) }},
		{"[fe80::1%eth0]:80", func(err error) bool { return errors.As(err, &blocked) }},
		{"127.0.0.1:3128", func(err error) bool { return errors.Is(err, errSelf) }},
		{"127.0.0.5:9090", func(err error) bool { return errors.Is(err, errSelf) }}, // 0.0.0.0 listener: any local address
		{"not-an-address", func(err error) bool { return err != nil }},
	}
	for _, tc := range cases {
		if err := control("tcp", tc.addr, nil); !tc.want(err) {
			t.Errorf("control(%s) = %v", tc.addr, err)
		}
	}
}
