package kerneltest

import (
	"testing"

	"github.com/vishvananda/netlink"
)

// AddLink creates the network interface link afresh (deleting one of its
// name left by an earlier run), brings it up and deletes it when the test
// ends. A failure to create it names module, the kernel module it needs.
func AddLink(tb testing.TB, link netlink.Link, module string) netlink.Link {
	tb.Helper()
	name := link.Attrs().Name
	if l, err := netlink.LinkByName(name); err == nil {
		_ = netlink.LinkDel(l)
	}
	if err := netlink.LinkAdd(link); err != nil {
		tb.Fatalf("create %s: %v (is the %s module loaded?)", name, err, module)
	}
	tb.Cleanup(func() {
		if l, err := netlink.LinkByName(name); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	l, err := netlink.LinkByName(name)
	if err != nil {
		tb.Fatal(err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		tb.Fatalf("%s up: %v", name, err)
	}
	return l
}
